package session

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe asks for a 1 MiB buffer (the default cap of
// /proc/sys/fs/pipe-max-size): a held shell's output waits there while its
// session has no owner.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
}
