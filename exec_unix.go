//go:build unix

package corral

import (
	"errors"
	"os"
	"syscall"
)

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func isNoExec(err error) bool {
	return errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EACCES)
}

// isENOEXEC reports whether exec failed because the file has no format
// the kernel knows (then execvp runs it with /bin/sh).
func isENOEXEC(err error) bool { return errors.Is(err, syscall.ENOEXEC) }

// growPipe asks for a larger pipe buffer (Linux; best effort): a command
// that writes fast then blocks less often, and the relay reads more per
// wake-up.
func growPipe(f *os.File) { growPipeOS(f) }
