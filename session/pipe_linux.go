package session

import (
	"os"

	"golang.org/x/sys/unix"
)

// setPipeSize sets the buffer of the pipe f to n bytes (best effort).
func setPipeSize(f *os.File, n int) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n) })
	}
}
