//go:build linux

package client_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/wire"
)

// TestBytesNotSentToAnOldDaemon: a daemon of protocol 1 ignores the
// _bytes fields and would run the command's text with "" in their place;
// the client refuses the call instead, saying why and what to do, and
// sends nothing. A call that is all UTF-8 goes through as before.
func TestBytesNotSentToAnOldDaemon(t *testing.T) {
	testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(state, "corral.sock"))
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan string, 4)
	done := make(chan struct{})
	go func() { // a daemon of version 1: a Welcome, then an empty result for any exec
		defer close(done)
		for {
			nc, err := lis.Accept()
			if err != nil {
				return
			}
			wc := wire.NewConn(nc)
			if _, _, err := wc.ReadFrame(wire.MaxHello); err != nil {
				nc.Close()
				continue
			}
			wc.WriteJSON(wire.FrameWelcome, wire.Welcome{Version: 1, Pid: 4242})
			go func() {
				defer nc.Close()
				for {
					typ, b, err := wc.ReadFrame(wire.MaxControl)
					if err != nil {
						return
					}
					calls <- string(b)
					if typ == wire.FrameCall {
						wc.WriteJSON(wire.FrameReply, wire.Result{Outcome: "exited", FirstOutputNs: -1})
					}
				}
			}()
		}
	}()
	defer func() { lis.Close(); <-done }()
	c, err := client.Dial(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, o := range []struct {
		what string
		code string
		opts client.ExecOptions
	}{
		{"command", "echo \xe9", client.ExecOptions{Env: []string{"A=1"}, Dir: "/"}},
		{"environment", "true", client.ExecOptions{Env: []string{"A=\xe9"}, Dir: "/"}},
		{"cwd", "true", client.ExecOptions{Env: []string{"A=1"}, Cwd: "/tmp/\xe9"}},
	} {
		_, err := c.Exec(ctx, "s", o.code, o.opts)
		if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "speaks protocol 1") || !strings.Contains(err.Error(), "corral daemon stop") {
			t.Errorf("%s that is not UTF-8, to a version-1 daemon: %v", o.what, err)
		}
	}
	select {
	case b := <-calls:
		t.Fatalf("the old daemon got a call: %s", b)
	default:
	}
	if _, err := c.Exec(ctx, "s", "echo é", client.ExecOptions{Env: []string{"A=é"}, Dir: "/"}); err != nil {
		t.Fatalf("a UTF-8 call to a version-1 daemon: %v", err)
	}
	if b := <-calls; !strings.Contains(b, `"command":"echo é"`) || strings.Contains(b, "_bytes") {
		t.Errorf("the UTF-8 call as sent: %s", b)
	}
}
