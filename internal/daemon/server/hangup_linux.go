package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerHungUp reports whether the peer of c has closed its end (or shut
// down its sending side), even with data of it still unread: POLLRDHUP,
// which a unix or TCP socket reports once the peer's FIN or close
// arrived. A connection with no descriptor reports false.
func peerHungUp(c net.Conn) bool {
	return polled(c, unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR)
}

// pending reports whether c has bytes to read (or its peer hung up):
// an idle connection whose client just sent its next call.
func pending(c net.Conn) bool {
	return polled(c, unix.POLLIN|unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR)
}

// polled reports whether c's descriptor has any of the events want now.
func polled(c net.Conn, want int16) bool {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn() // a TLS connection's socket (TCP reports POLLRDHUP too)
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	got := false
	raw.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: want}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 {
			got = p[0].Revents&want != 0
		}
	})
	return got
}
