//go:build linux || darwin

package unixsock

import "net"

func peerCheckSupported() error { return nil }

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid, uerr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { uid, uerr = uidOf(int(fd)) }); err != nil {
		return -1, err
	}
	return uid, uerr
}
