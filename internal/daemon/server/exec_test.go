//go:build linux

package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/wire"
)

// runDaemon serves a daemon in this process on cfg.StateDir until the
// returned stop, which returns once Serve has.
func runDaemon(t *testing.T, cfg server.Config) (stop func()) {
	t.Helper()
	s, err := server.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	return func() { cancel(); <-served }
}

// serveDaemon runs a daemon in this process on a fresh state directory and
// returns a client of it; cleanup kills its sessions and stops it.
func serveDaemon(t *testing.T, cfg server.Config) *client.Client {
	t.Helper()
	cfg.StateDir = t.TempDir()
	stop := runDaemon(t, cfg)
	c, err := client.Dial(context.Background(), cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := c.Kill(kctx, true); err != nil {
			t.Errorf("kill --all: %v", err)
		}
		c.Close()
		stop()
	})
	return c
}

// rawConn is a hand-made connection to the daemon of state, past its
// handshake.
func rawConn(t *testing.T, state string) *wire.Conn {
	t.Helper()
	nc, err := net.Dial("unix", wire.SocketPath(state))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := wire.NewConn(nc)
	if err := c.WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{1}}); err != nil {
		t.Fatal(err)
	}
	if typ, b, err := c.ReadFrame(wire.MaxControl); err != nil || typ != wire.FrameWelcome {
		t.Fatalf("handshake: %q %s %v", typ, b, err)
	}
	return c
}

// TestExecClientThatNeverReads: a client that starts a flood of output and
// never reads holds its session's turn only for the daemon's bound: then
// the command's tree is stopped, the daemon logs why, the next client's
// command on the session runs, and the reader-less call ends with an error
// of kind not_reading.
// Before the bound, the second client waited out its own deadline.
func TestExecClientThatNeverReads(t *testing.T) {
	mark := testproc.Guard(t, 90*time.Second)
	var log testproc.Buffer
	const stall = 2 * time.Second
	state := t.TempDir()
	c := serveDaemon(t, server.Config{Config: daemon.Config{StateDir: state, Log: slog.New(slog.NewTextHandler(&log, nil))}, SendStall: stall})
	env := testproc.Env(mark)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, "s", "true", client.ExecOptions{Env: env, Dir: "/"}); err != nil {
		t.Fatal(err)
	}
	baseline := runtime.NumGoroutine()

	pidFile := filepath.Join(t.TempDir(), "pid")
	flood := rawConn(t, c.StateDir())
	flood.WriteJSON(wire.FrameCall, wire.Call{Call: wire.CallExec, Exec: &wire.Exec{Session: "s",
		Command: "sh -c 'echo $$ > " + pidFile + "; exec yes'", Dir: "/", Env: env}})
	pid := testproc.PidFile(t, pidFile, 20*time.Second)

	began := time.Now()
	var out bytes.Buffer
	ctx2, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	_, err := c.Exec(ctx2, "s", "echo second", client.ExecOptions{Env: env, Dir: "/", Stdout: &out})
	took := time.Since(began)
	alive := testproc.Alive(pid)
	t.Logf("second command after %v: %q %v", took.Round(time.Millisecond), out.String(), err)
	if err != nil || out.String() != "second\n" {
		t.Fatalf("the second client's command: %q %v", out.String(), err)
	}
	if alive {
		t.Errorf("the unread command (yes, pid %d) still runs after the next command ran", pid)
	}
	if took > stall+15*time.Second {
		t.Errorf("the second command waited %v for a bound of %v", took, stall)
	}
	if !strings.Contains(log.String(), "client read none of its command's output") {
		t.Errorf("the stop is not logged:\n%s", log.String())
	}
	// The reader-less client, reading at last, gets what was sent before
	// the stop and then the reason, not a result.
	flood.Net().SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		typ, b, err := flood.ReadFrame(wire.MaxControl)
		if err != nil {
			t.Fatalf("the reader-less call ended with %v, not an error frame", err)
		}
		if typ == wire.FrameError {
			var e wire.Error
			if wire.Decode(b, &e); e.Kind != wire.KindNotReading || !strings.Contains(e.Message, "read none") {
				t.Fatalf("the reader-less call ended with %+v, want not_reading", e)
			}
			break
		}
		if typ == wire.FrameReply {
			t.Fatalf("the reader-less call got a result: %s", b)
		}
	}
	flood.Net().Close()
	// Every goroutine of the two streams ends with them (the sender held
	// in its blocked Send included).
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after the streams ended, %d before:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}
