package corral

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/windows"
)

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() {
		return false
	}
	switch strings.ToLower(filepath.Ext(p)) {
	case ".exe", ".com", ".bat", ".cmd":
		return true
	}
	return false
}

func isNoExec(err error) bool {
	return errors.Is(err, windows.ERROR_BAD_EXE_FORMAT) || errors.Is(err, windows.ERROR_ACCESS_DENIED)
}

func growPipe(f *os.File) {}

// isENOEXEC is false: Windows has no /bin/sh to fall back to.
func isENOEXEC(err error) bool { return false }
