//go:build !linux

package server

import (
	"errors"
	"net"
	"time"
)

// setUserTimeout is TCP_USER_TIMEOUT, which only Linux has: elsewhere
// keepalive alone bounds an idle dead peer, and a peer lost with data
// unacknowledged is noticed after the system's retransmission timeout.
func setUserTimeout(nc net.Conn, d time.Duration) error { return errors.ErrUnsupported }
