//go:build !linux && !darwin

package unixsock

import (
	"fmt"
	"net"

	"github.com/corral-dev/corral/internal/contain"
)

func peerCheckSupported() error {
	return fmt.Errorf("checking peer credentials: %w", contain.ErrUnsupported)
}

func peerUID(c *net.UnixConn) (int, error) { return -1, contain.ErrUnsupported }
