//go:build linux

package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/wire"
)

// TestClientLostDuringHandshake: a daemon that goes away while the client
// opens a connection for a call (it closes the connection unanswered, as a
// stopping daemon does) is ErrLost, like one lost during the call: under
// load a command sent just as the daemon stopped got a bare "write: broken
// pipe" that no errors.Is matched.
func TestClientLostDuringHandshake(t *testing.T) {
	state := t.TempDir()
	lis, err := net.Listen("unix", wire.SocketPath(state))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { lis.Close(); <-done }()
	go func() {
		defer close(done)
		for first := true; ; first = false {
			nc, err := lis.Accept()
			if err != nil {
				return
			}
			if first { // the Dial's connection is welcomed, then dropped
				wc := wire.NewConn(nc)
				wc.ReadFrame(wire.MaxHello)
				wc.WriteJSON(wire.FrameWelcome, wire.Welcome{Version: wire.Version, Pid: 1})
			}
			nc.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // the Dial's connection is closed by now
	if _, err := c.List(ctx); !errors.Is(err, client.ErrLost) {
		t.Fatalf("a call to a daemon that drops every connection: %v, want ErrLost", err)
	}
}
