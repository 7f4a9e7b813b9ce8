package daemon_test

import (
	"context"
	"testing"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
)

// runDaemon serves a daemon in this process on cfg.StateDir until the
// returned stop, which returns once Serve has.
func runDaemon(t *testing.T, cfg daemon.Config) (stop func()) {
	t.Helper()
	s, err := server.Open(server.Config{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	return func() { cancel(); <-served }
}
