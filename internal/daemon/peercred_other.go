//go:build !linux && !darwin

package daemon

import (
	"fmt"
	"net"

	"github.com/corral-dev/corral/internal/contain"
)

// checkPeers has no way to learn a peer's uid here, and the daemon does not
// serve connections it cannot check.
func checkPeers(l net.Listener) (net.Listener, error) {
	return nil, fmt.Errorf("checking peer credentials: %w", contain.ErrUnsupported)
}
