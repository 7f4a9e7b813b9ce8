//go:build linux

package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
)

// cutWriter collects what it is given and cancels its call once it holds
// at least after bytes: the client goes away mid-output.
type cutWriter struct {
	mu     sync.Mutex
	b      bytes.Buffer
	after  int
	cancel context.CancelFunc
}

func (w *cutWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.b.Len() >= w.after && w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
	return len(p), nil
}

func (w *cutWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// numbered is the output of numberedCmd(n, pause): lines 1 to n.
func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// numberedCmd prints lines 1 to n, half of them before a pause, the
// other half after, and one on stderr at the end (merged by the client
// here: one writer).
func numberedCmd(n int, pause string, marker string) string {
	return fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; [ $i = %d ] && sleep %s; i=$((i+1)); done; touch %s`, n, n/2, pause, marker)
}

// TestDetachedJobResumedByOffset: a client of a detached exec that goes
// away mid-output leaves the command running; resuming from the byte
// count the client got gives the rest, no byte lost or repeated, and the
// result last; a second resume from 0 gives the whole output again; a bad
// offset and an unknown job are refused, saying why. Without detach, the
// same cut stops the command (the default is unchanged).
func TestDetachedJobResumedByOffset(t *testing.T) {
	mark := testproc.Guard(t, 90*time.Second)
	var log testproc.Buffer
	c := serveDaemon(t, server.Config{Config: daemon.Config{Log: slog.New(slog.NewTextHandler(&log, nil))}})
	env := testproc.Env(mark)
	const n = 4000
	want := numbered(n)
	marker := filepath.Join(t.TempDir(), "finished")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &cutWriter{after: 1000, cancel: cancel}
	var job string
	_, err := c.Exec(ctx, "s", numberedCmd(n, "1", marker), client.ExecOptions{Env: env, Dir: "/", Stdout: first, Stderr: first,
		DetachOnDisconnect: true, OnJob: func(j string) { job = j }})
	if err == nil || job == "" {
		t.Fatalf("the cut call: %v, job %q", err, job)
	}
	got := first.String()
	if !strings.HasPrefix(want, got) {
		t.Fatalf("the first part is not a prefix of the output: %q", got[:min(len(got), 200)])
	}
	t.Logf("job %s: the client went away after %d bytes", job, len(got))

	var rest bytes.Buffer
	res, err := c.Resume(context.Background(), job, int64(len(got)), client.ExecOptions{Stdout: &rest, Stderr: &rest})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("resume: %v %+v", err, res)
	}
	if whole := got + rest.String(); whole != want {
		t.Fatalf("cut + resumed output differs from the command's: %d+%d bytes, want %d", len(got), rest.Len(), len(want))
	}
	if !exists(marker) {
		t.Errorf("the command did not run to its end")
	}
	if !strings.Contains(log.String(), "client went away; its command goes on as a detached job") {
		t.Errorf("the detach is not logged:\n%s", log.String())
	}

	var again bytes.Buffer
	if res, err := c.Resume(context.Background(), job, 0, client.ExecOptions{Stdout: &again}); err != nil || res.ExitCode != 0 || again.String() != want {
		t.Errorf("resume from 0 of the finished job: %v %+v, %d bytes (want %d)", err, res, again.Len(), len(want))
	}
	if _, err := c.Resume(context.Background(), job, int64(len(want)+1), client.ExecOptions{}); !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "keeps bytes 0 to") {
		t.Errorf("resume past the end: %v", err)
	}
	if _, err := c.Resume(context.Background(), "j0000000000000000", 0, client.ExecOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("resume of an unknown job: %v", err)
	}

	// Without detach, the same cut stops the command.
	marker2 := filepath.Join(t.TempDir(), "finished2")
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	cut := &cutWriter{after: 1000, cancel: cancel2}
	if _, err := c.Exec(ctx2, "s", numberedCmd(n, "1", marker2), client.ExecOptions{Env: env, Dir: "/", Stdout: cut}); err == nil {
		t.Fatal("the cut call without detach succeeded")
	}
	if res, err := c.Exec(context.Background(), "s", "echo next", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("the next command: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if exists(marker2) {
		t.Errorf("without detach, the command of a client that went away ran to its end")
	}
}

// TestDetachedJobOutputPastWhatIsKept: a detached job whose client stays
// gets all of its output even past what the daemon keeps: the log never
// drops bytes a reader has not taken (the command waits): the whole output, far
// more than the daemon keeps, arrives whole.
func TestDetachedJobOutputPastWhatIsKept(t *testing.T) {
	mark := testproc.Guard(t, 120*time.Second)
	c := serveDaemon(t, server.Config{})
	env := testproc.Env(mark)
	// 12 MiB of numbered lines: three times what a job keeps.
	const n = 1_200_000
	var out bytes.Buffer
	res, err := c.Exec(context.Background(), "", fmt.Sprintf("seq 1 %d | sed 's/^/line /'", n), client.ExecOptions{Env: env, Dir: "/",
		Oneshot: true, Stdout: &out, DetachOnDisconnect: true})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("detached exec, client there throughout: %v %+v", err, res)
	}
	if out.String() != numbered(n) {
		t.Fatalf("output of %d bytes differs from the command's (%d bytes)", out.Len(), len(numbered(n)))
	}
}
