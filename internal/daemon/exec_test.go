//go:build linux

package daemon_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/testproc"
)

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runDaemon opens a daemon in this process on cfg.StateDir and serves it
// until the returned stop, which returns once Serve has.
func runDaemon(t *testing.T, cfg daemon.Config) (stop func()) {
	t.Helper()
	d, err := daemon.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	return func() { cancel(); <-served }
}

// serveDaemon runs a daemon in this process on a fresh state directory and
// returns a connection to it; cleanup kills its sessions and stops it.
func serveDaemon(t *testing.T, cfg daemon.Config) *grpc.ClientConn {
	t.Helper()
	cfg.StateDir = t.TempDir()
	stop := runDaemon(t, cfg)
	conn, err := grpc.NewClient("unix:"+daemon.SocketPath(cfg.StateDir), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := client.FromConn(conn).Kill(kctx, true); err != nil {
			t.Errorf("kill --all: %v", err)
		}
		conn.Close()
		stop()
	})
	return conn
}

// TestExecClientThatNeverReads: a client that starts a flood of output and
// never reads holds its session's turn only for the daemon's bound: then
// the command's tree is stopped, the daemon logs why, the next client's
// command on the session runs, and the reader-less call ends Aborted.
// Before the bound, the second client waited out its own deadline.
func TestExecClientThatNeverReads(t *testing.T) {
	mark := testproc.Guard(t, 90*time.Second)
	var log syncBuffer
	const stall = 2 * time.Second
	conn := serveDaemon(t, daemon.Config{SendStall: stall, Log: slog.New(slog.NewTextHandler(&log, nil))})
	env := testproc.Env(mark)
	c := client.FromConn(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, "s", "true", client.ExecOptions{Env: env, Dir: "/"}); err != nil {
		t.Fatal(err)
	}
	baseline := runtime.NumGoroutine()

	pidFile := filepath.Join(t.TempDir(), "pid")
	flood, err := pb.NewDaemonClient(conn).Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flood.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: &pb.ExecStart{Session: "s",
		Command: "sh -c 'echo $$ > " + pidFile + "; exec yes'", Cwd: "/", Env: env}}})
	pid := testproc.PidFile(t, pidFile, 20*time.Second)

	began := time.Now()
	var out bytes.Buffer
	ctx2, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	_, err = c.Exec(ctx2, "s", "echo second", client.ExecOptions{Env: env, Dir: "/", Stdout: &out})
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
	for {
		m, err := flood.Recv()
		if err != nil {
			if s, _ := status.FromError(err); s.Code() != codes.Aborted || !strings.Contains(s.Message(), "read none") {
				t.Fatalf("the reader-less call ended with %v, want Aborted", err)
			}
			break
		}
		if m.GetResult() != nil {
			t.Fatalf("the reader-less call got a result: %v", m.GetResult())
		}
	}
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
