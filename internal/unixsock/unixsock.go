// Package unixsock listens on corral's unix sockets (the daemon's API):
// created 0600, never taken over while something answers on them,
// replaced when stale, and (with OwnerOnly) answering only processes of
// this process's uid.
package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// ErrInUse means another process serves on the socket.
var ErrInUse = errors.New("another process is serving on it")

// Listen listens on path with mode 0600. An existing socket file is dialled
// first and removed only if nothing answers (it is stale). The socket lives
// in a 0700 directory, so the moment before the chmod exposes nothing; no
// process-wide umask is touched.
func Listen(path string) (net.Listener, error) {
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: %w", path, ErrInUse)
		}
		os.Remove(path)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return lis, nil
}

// OwnerOnly wraps l so that Accept returns only connections from processes
// of this process's uid; others are closed at once. Where a peer's uid
// cannot be learnt it fails (a daemon does not serve what it cannot check).
func OwnerOnly(l net.Listener) (net.Listener, error) {
	if err := peerCheckSupported(); err != nil {
		return nil, err
	}
	return &ownerOnly{Listener: l}, nil
}

type ownerOnly struct{ net.Listener }

func (l *ownerOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uc, ok := c.(*net.UnixConn); ok {
			if uid, err := peerUID(uc); err == nil && uid == os.Getuid() {
				return c, nil
			}
		}
		c.Close()
	}
}

// PeerUID is the uid of the process at the other end of c, a unix socket
// connection. Where it cannot be learnt it fails (contain.ErrUnsupported
// where the platform cannot tell).
func PeerUID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("not a unix socket connection (%T)", c)
	}
	return peerUID(uc)
}

// PeerCheckSupported fails where PeerUID cannot work.
func PeerCheckSupported() error { return peerCheckSupported() }
