//go:build linux

package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/mcpserver"
	"github.com/corral-dev/corral/internal/testproc"
)

// serve runs a daemon in this process on a fresh state directory, and a
// Server on it connected to the go-sdk's client over the in-memory
// transport; cleanup ends the client, the server, the sessions and the
// daemon.
func serve(t *testing.T, cfg mcpserver.Config) (*mcp.ClientSession, *mcpserver.Server, string) {
	t.Helper()
	mark := testproc.Guard(t, 90*time.Second)
	state := t.TempDir()
	d, err := server.Open(server.Config{Config: daemon.Config{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	cl, err := client.Dial(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir, cfg.Env, cfg.Dir = state, testproc.Env(mark), "/"
	cfg.Dial = func(context.Context) (mcpserver.Daemon, error) { return cl, nil }
	s, err := mcpserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.NewMCP().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		s.StopAll()
		s.Close()
		kctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl.Kill(kctx, true)
		cl.Close()
		stop()
		<-served
	})
	return cs, s, state
}

func callExec(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (mcpserver.ExecOutput, *mcp.CallToolResult) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var o mcpserver.ExecOutput
	b, _ := json.Marshal(r.StructuredContent)
	json.Unmarshal(b, &o)
	return o, r
}

func TestInMemoryExecYieldWait(t *testing.T) {
	cs, s, state := serve(t, mcpserver.Config{Session: "mem"})
	o, r := callExec(t, cs, "exec", map[string]any{"command": "cd /tmp; echo one"})
	if r.IsError || o.Status != "done" || o.Output != "one\n" || o.Cwd != "/tmp" || o.Session != "mem" || s.DefaultSessionName() != "mem" {
		t.Fatalf("exec: %+v %v", o, r.Content)
	}
	if !strings.HasPrefix(r.Content[0].(*mcp.TextContent).Text, "[job "+o.Job+" exited, exit 0") {
		t.Errorf("text: %q", r.Content[0].(*mcp.TextContent).Text)
	}
	o, _ = callExec(t, cs, "exec", map[string]any{"command": "echo a; sleep 1; echo b", "yield_ms": "200"})
	if o.Status != "running" || o.Output != "a\n" {
		t.Fatalf("yield: %+v", o)
	}
	w, _ := callExec(t, cs, "exec_wait", map[string]any{"job": o.Job, "yield_ms": 100})
	if w.Status != "running" && w.Output != "" {
		t.Errorf("exec_wait before the end: %+v", w)
	}
	w, _ = callExec(t, cs, "exec_wait", map[string]any{"job": o.Job})
	if w.Status != "done" || w.Output != "b\n" || w.NextOffset != 4 {
		t.Errorf("exec_wait: %+v", w)
	}
	if fi, err := os.Stat(filepath.Join(state, "mcp-output", o.Job+".out")); err != nil || fi.Size() != 4 {
		t.Errorf("output file: %v %v", fi, err)
	}
	// Exec of a session that is busy with a yielded job waits its turn.
	o, _ = callExec(t, cs, "exec", map[string]any{"command": "sleep 0.5; echo first", "yield_ms": 0})
	o2, _ := callExec(t, cs, "exec", map[string]any{"command": "echo second"})
	f, _ := callExec(t, cs, "exec_wait", map[string]any{"job": o.Job, "offset": 0})
	if o2.Output != "second\n" || f.Output != "first\n" {
		t.Errorf("two jobs on one session: %+v %+v", f, o2)
	}
}

func TestInMemoryCancel(t *testing.T) {
	cs, _, _ := serve(t, mcpserver.Config{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
			"command": "sh -c 'trap \"\" TERM; echo $$ > " + pidFile + "; while :; do sleep 0.01; done'"}})
	}()
	pid := testproc.PidFile(t, pidFile, 20*time.Second)
	start := time.Now()
	cancel()
	for testproc.Alive(pid) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("a TERM-ignoring command survived the cancel")
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("cancel -> TERM-ignoring tree gone in %v (SIGKILL after 50 ms)", time.Since(start))
	<-done
	o, _ := callExec(t, cs, "exec", map[string]any{"command": "echo after"})
	if o.Output != "after\n" {
		t.Errorf("after cancel: %+v", o)
	}
}
