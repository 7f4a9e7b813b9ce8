package holder

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readBatch reads what the PTY has, up to len(buf), waiting (on the
// poller) only while it has nothing. A PTY hands out at most a few KiB
// per read; taking all that is ready at once costs the screen model, the
// lock and the clients' queues one pass per batch instead of one per
// read (BenchmarkThroughput).
func readBatch(f *os.File, buf []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return f.Read(buf)
	}
	n := 0
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for n < len(buf) {
			m, e := unix.Read(int(fd), buf[n:])
			switch {
			case m > 0:
				n += m
			case e == unix.EINTR:
			case e == unix.EAGAIN:
				return n > 0
			case e == nil:
				rerr = io.EOF
				return true
			default:
				rerr = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	return n, err
}
