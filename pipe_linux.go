package corral

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is the buffer asked for; /proc/sys/fs/pipe-max-size (1 MiB by
// default) caps what an unprivileged process gets.
const pipeSize = 1 << 20

func growPipeOS(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}
