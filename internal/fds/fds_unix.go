//go:build unix

package fds

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseOnExecFrom marks every open descriptor numbered low or above
// close-on-exec: it stays open in this process, and no program this process
// executes gets it.
func CloseOnExecFrom(low int) error {
	d, err := os.Open("/dev/fd")
	if err != nil {
		// A minimal root may lack /dev/fd; Linux has the same list in /proc.
		if d, err = os.Open("/proc/self/fd"); err != nil {
			return err
		}
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd < low {
			continue
		}
		// The descriptor that listed /dev/fd is closed by now; a number
		// that is no longer open gives EBADF, which is not an error here.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return err
		}
	}
	return nil
}
