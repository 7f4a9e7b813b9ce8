package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerHungUp reports whether the peer of c has closed its end (or shut
// down its sending side), even with data of it still unread: POLLRDHUP,
// which a unix or TCP socket reports once the peer's FIN or close
// arrived. A connection with no descriptor (TLS wraps one) reports false.
func peerHungUp(c net.Conn) bool {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	hung := false
	raw.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 {
			hung = p[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hung
}
