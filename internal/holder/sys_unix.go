//go:build unix

package holder

import (
	"os"

	"golang.org/x/sys/unix"
)

const oNoFollow = unix.O_NOFOLLOW

func unixGetsid() int {
	sid, _ := unix.Getsid(0)
	return sid
}

func unixSetsid() error {
	_, err := unix.Setsid()
	return err
}

func dupStdin(f *os.File) error { return unix.Dup2(int(f.Fd()), 0) }

// releaseStdin points descriptor 0 at the null device.
func releaseStdin() error {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Dup2(int(f.Fd()), 0)
}
