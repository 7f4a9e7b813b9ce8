package daemon

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

func checkPeers(l net.Listener) (net.Listener, error) { return &peerCredListener{Listener: l}, nil }

// peerCredListener accepts only connections from processes of our own uid
// (SO_PEERCRED); others are closed at once.
type peerCredListener struct{ net.Listener }

func (l *peerCredListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			continue
		}
		raw, err := uc.SyscallConn()
		if err != nil {
			c.Close()
			continue
		}
		var cred *unix.Ucred
		var cerr error
		raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
		if cerr != nil || int(cred.Uid) != os.Getuid() {
			c.Close()
			continue
		}
		return c, nil
	}
}
