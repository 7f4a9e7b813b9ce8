//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-dev/corral/internal/mcpserver"
	"github.com/corral-dev/corral/internal/testproc"
)

// mcpClient starts "corral mcp args..." against e's state directory and
// connects the go-sdk's client to it over stdio; cleanup closes it (stdin
// EOF) and waits for the server to exit.
func mcpClient(t *testing.T, e *daemonEnv, args ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	c := cli(t, e.mark, e.state, append([]string{"mcp"}, args...)...)
	c.Dir = t.TempDir()
	c.Stderr = os.Stderr
	cl := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: c, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, c
}

// call calls tool and decodes its structured reply into out (if not nil).
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structuredContent %s: %v", tool, b, err)
		}
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func execOK(t *testing.T, cs *mcp.ClientSession, args map[string]any) mcpserver.ExecOutput {
	t.Helper()
	var o mcpserver.ExecOutput
	r := call(t, cs, "exec", args, &o)
	if r.IsError {
		t.Fatalf("exec %v: tool error: %s", args, text(r))
	}
	return o
}

func TestMCPToolsHaveSchemas(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s: input schema %v, output schema %v", tool.Name, tool.InputSchema != nil, tool.OutputSchema != nil)
		}
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "exec exec_cancel exec_wait kill_session sessions term_open term_screen term_send term_wait" {
		t.Errorf("tools: %s", got)
	}
}

func TestMCPExec(t *testing.T) {
	e := newDaemonEnv(t)
	cs, c := mcpClient(t, e)
	// (exit in a session's shell would end the shell: the session
	// restarts, and the result says so.)
	o := execOK(t, cs, map[string]any{"command": "echo hi; echo oops >&2; sh -c 'exit 3'"})
	// One channel for both streams: the order they were written in.
	if o.Status != "done" || o.Outcome != "exited" || o.ExitCode == nil || *o.ExitCode != 3 ||
		o.Output != "hi\noops\n" || o.Error != "" {
		t.Fatalf("exec: %+v", o)
	}
	want := mcpserver.DefaultSession(c.Dir)
	if o.Session != want || o.Cwd != c.Dir || o.OutputFile == "" || o.Truncated || o.TotalBytes != 8 || o.NextOffset != 8 {
		t.Errorf("exec fields: %+v (want session %s, cwd %s)", o, want, c.Dir)
	}
	// The session persists: cd sticks, and the reply's cwd follows it.
	o = execOK(t, cs, map[string]any{"command": "cd /tmp"})
	if o.Cwd != "/tmp" {
		t.Errorf("cwd after cd /tmp: %q", o.Cwd)
	}
	o = execOK(t, cs, map[string]any{"command": "pwd", "cwd": "/"})
	if o.Output != "/\n" || o.Cwd != "/" {
		t.Errorf("cwd /: %+v", o)
	}
	// A person sees the agent's session and can use it.
	if _, ok := e.ls()[want]; !ok {
		t.Errorf("corral ls does not show %s: %v", want, e.ls())
	}
	if out, rc := e.exec(want, "pwd"); rc != 0 || out != "/\n" {
		t.Errorf("corral exec -s %s pwd: %q %d", want, out, rc)
	}
	// Agent environment, and a request overriding it.
	o = execOK(t, cs, map[string]any{"command": `echo "$PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT"`})
	if o.Output != "cat cat 0\n" {
		t.Errorf("agent env: %q", o.Output)
	}
	o = execOK(t, cs, map[string]any{"command": `echo "$PAGER $FOO"`, "env": map[string]any{"PAGER": "less", "FOO": "it's"}})
	if o.Output != "less it's\n" {
		t.Errorf("request env: %q", o.Output)
	}
	// stdin: EOF unless given.
	start := time.Now()
	o = execOK(t, cs, map[string]any{"command": "cat; echo end"})
	if o.Output != "end\n" || time.Since(start) > 10*time.Second {
		t.Errorf("cat without stdin: %+v", o)
	}
	o = execOK(t, cs, map[string]any{"command": "tr a-z A-Z", "stdin": "hello\n"})
	if o.Output != "HELLO\n" {
		t.Errorf("stdin: %q", o.Output)
	}
	// A oneshot is a fresh shell: no session, none of the session's cwd.
	o = execOK(t, cs, map[string]any{"command": "pwd; echo $$", "oneshot": true, "cwd": "/usr"})
	if o.Session != "" || !strings.HasPrefix(o.Output, "/usr\n") || o.Outcome != "exited" {
		t.Errorf("oneshot: %+v", o)
	}
	// A named session, created on first use; timeout stops it.
	o = execOK(t, cs, map[string]any{"command": "sleep 30", "session": "other", "timeout_ms": 300})
	if o.Outcome != "timeout" || o.Session != "other" || o.DurationMs > 10000 {
		t.Errorf("timeout: %+v", o)
	}
	var ss mcpserver.SessionsOutput
	call(t, cs, "sessions", nil, &ss)
	found := map[string]mcpserver.SessionInfo{}
	for _, s := range ss.Sessions {
		found[s.Name] = s
	}
	if found[want].Cwd != "/" || !found[want].Default || found[want].State != "up" || found["other"].Name != "other" || ss.Default != want {
		t.Errorf("sessions: %+v", ss)
	}
	var k mcpserver.KillSessionOutput
	if r := call(t, cs, "kill_session", map[string]any{"name": "other"}, &k); r.IsError || k.Killed != "other" {
		t.Errorf("kill_session: %s", text(r))
	}
	if _, ok := e.ls()["other"]; ok {
		t.Error("session other still listed after kill_session")
	}
	if r := call(t, cs, "kill_session", map[string]any{"name": "other"}, nil); !r.IsError {
		t.Errorf("kill_session of a gone session: %s", text(r))
	}
}

func TestMCPSessionFlag(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e, "--session", "agent1", "--no-agent-env")
	o := execOK(t, cs, map[string]any{"command": `echo "${GIT_TERMINAL_PROMPT-unset}"`})
	if o.Session != "agent1" || o.Output != "unset\n" {
		t.Errorf("--session/--no-agent-env: %+v", o)
	}
}

func TestMCPYieldAndResume(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	start := time.Now()
	o := execOK(t, cs, map[string]any{"command": "echo a; sleep 1.5; echo b", "yield_ms": 300})
	if o.Status != "running" || o.Job == "" || o.Output != "a\n" || o.Outcome != "" || o.ExitCode != nil {
		t.Fatalf("yield: %+v", o)
	}
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Errorf("exec with yield_ms 300 took %v", d)
	}
	var w mcpserver.ExecOutput
	call(t, cs, "exec_wait", map[string]any{"job": o.Job}, &w)
	if w.Status != "done" || w.Output != "b\n" || w.Offset != 2 || w.NextOffset != 4 || *w.ExitCode != 0 {
		t.Errorf("exec_wait: %+v", w)
	}
	// A finished job's output from any offset.
	call(t, cs, "exec_wait", map[string]any{"job": o.Job, "offset": 0}, &w)
	if w.Output != "a\nb\n" || w.Status != "done" {
		t.Errorf("exec_wait offset 0: %+v", w)
	}
	// yield_ms 0 returns at once; exec_cancel stops it with outcome cancelled.
	o = execOK(t, cs, map[string]any{"command": "echo x; sleep 60", "yield_ms": 0})
	if o.Status != "running" {
		t.Fatalf("yield 0: %+v", o)
	}
	call(t, cs, "exec_wait", map[string]any{"job": o.Job, "offset": 0, "yield_ms": 300}, &w)
	if w.Status != "running" || w.Output != "x\n" {
		t.Fatalf("exec_wait of the running job: %+v", w)
	}
	var c mcpserver.ExecOutput
	start = time.Now()
	call(t, cs, "exec_cancel", map[string]any{"job": o.Job}, &c)
	if c.Status != "done" || c.Outcome != "cancelled" || c.Output != "" || c.TotalBytes != 2 || c.Offset != 2 {
		t.Errorf("exec_cancel: %+v", c)
	}
	t.Logf("exec_cancel of sleep 60 took %v", time.Since(start))
	// The session was reset and serves the next command.
	if o := execOK(t, cs, map[string]any{"command": "echo next"}); o.Output != "next\n" {
		t.Errorf("after cancel: %+v", o)
	}
}

func TestMCPTruncation(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	o := execOK(t, cs, map[string]any{"command": "seq 1 100000", "max_output_bytes": 1000})
	full, _ := exec.Command("seq", "1", "100000").Output()
	if !o.Truncated || o.TotalBytes != int64(len(full)) {
		t.Fatalf("truncation: truncated %v total %d (want %d)", o.Truncated, o.TotalBytes, len(full))
	}
	head, rest, ok := strings.Cut(o.Output, "\n[corral: ")
	marker, tail, ok2 := strings.Cut(rest, "]\n")
	if !ok || !ok2 || !strings.HasPrefix(head, "1\n2\n3\n") || !strings.HasSuffix(tail, "99999\n100000\n") {
		t.Fatalf("head/tail: %q", o.Output)
	}
	if int64(len(head)+len(tail))+o.OmittedBytes != o.TotalBytes || len(head)+len(tail) > 1000 {
		t.Errorf("head %d + tail %d + omitted %d != %d", len(head), len(tail), o.OmittedBytes, o.TotalBytes)
	}
	if !strings.Contains(marker, strconv.FormatInt(o.OmittedBytes, 10)+" bytes left out") || !strings.Contains(marker, o.OutputFile) {
		t.Errorf("marker line: %q", marker)
	}
	kept, err := os.ReadFile(o.OutputFile)
	if err != nil || string(kept) != string(full) {
		t.Errorf("output_file %s: %d bytes, %v (want %d)", o.OutputFile, len(kept), err, len(full))
	}
	fi, _ := os.Stat(o.OutputFile)
	di, _ := os.Stat(filepath.Dir(o.OutputFile))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 || filepath.Dir(o.OutputFile) != filepath.Join(e.state, "mcp-output") {
		t.Errorf("output_file %s mode %v, dir mode %v", o.OutputFile, fi.Mode(), di.Mode())
	}
}

func TestMCPMergedOrder(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	o := execOK(t, cs, map[string]any{"command": "for i in $(seq 200); do echo out$i; echo err$i >&2; done", "max_output_bytes": 100000})
	var want strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&want, "out%d\nerr%d\n", i, i)
	}
	lines := strings.Split(strings.TrimSuffix(o.Output, "\n"), "\n")
	var out, errs []string
	moved := 0
	wantLines := strings.Split(want.String(), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "out") {
			out = append(out, l)
		} else {
			errs = append(errs, l)
		}
		if l != wantLines[i] {
			moved++
		}
	}
	// Each stream keeps its own order whatever the merge.
	if len(out) != 200 || len(errs) != 200 || out[199] != "out200" || errs[199] != "err200" {
		t.Fatalf("merged output lost lines: %d out, %d err", len(out), len(errs))
	}
	// One channel for both streams (the session's command has its stderr
	// on its stdout): exactly the write order.
	if moved != 0 || o.Output != want.String() {
		t.Fatalf("merged order: %d of 400 lines away from write order; first lines: %q", moved, lines[:8])
	}
}

// startTree runs in the session a tree of n sleeps whose pids it writes
// to pidFile, and returns them once they are all written; the exec call's
// result goes to done when the call returns.
func startTree(t testing.TB, cs *mcp.ClientSession, ctx context.Context, n int, pidFile string, done chan<- *mcp.CallToolResult) []int {
	t.Helper()
	go func() {
		r, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
			"command":  fmt.Sprintf("for i in $(seq %d); do sleep 300 & echo $! >> %s; done; echo ready >> %s.ready; wait", n, pidFile, pidFile),
			"yield_ms": 55000}})
		done <- r
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(pidFile + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tree did not start")
		}
	}
	b, _ := os.ReadFile(pidFile)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
	}
	if len(pids) != n {
		t.Fatalf("%d pids, want %d", len(pids), n)
	}
	return pids
}

// waitAllGone reports whether every one of pids is gone within d (looked
// at least once).
func waitAllGone(pids []int, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		alive := false
		for _, p := range pids {
			if testproc.Alive(p) {
				alive = true
				break
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func TestMCPCancelStopsTheTree(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	var took []time.Duration
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *mcp.CallToolResult, 1)
		pids := startTree(t, cs, ctx, 100, filepath.Join(t.TempDir(), "pids"), done)
		start := time.Now()
		cancel() // the client sends notifications/cancelled
		if !waitAllGone(pids, 10*time.Second) {
			t.Fatalf("tree of 100 still alive 10s after the cancel notification")
		}
		took = append(took, time.Since(start))
		<-done
		// The session serves the next call.
		if o := execOK(t, cs, map[string]any{"command": "echo ok"}); o.Output != "ok\n" {
			t.Fatalf("after cancel: %+v", o)
		}
	}
	sort.Slice(took, func(a, b int) bool { return took[a] < took[b] })
	t.Logf("cancel notification -> 100-process tree gone: min %v median %v max %v", took[0], took[len(took)/2], took[len(took)-1])
	if took[len(took)-1] > 3*time.Second {
		t.Errorf("cancel took up to %v", took[len(took)-1])
	}
}

// mcpClientRaw is mcpClient over the command's own pipes: closing the
// returned stdin is a client gone at once (the SDK's Close first waits for
// the calls in flight).
func mcpClientRaw(t *testing.T, e *daemonEnv) (*mcp.ClientSession, *exec.Cmd, io.Closer) {
	t.Helper()
	c := cli(t, e.mark, e.state, "mcp")
	c.Dir = t.TempDir()
	c.Stderr = os.Stderr
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "0"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		c.Process.Kill()
		c.Wait()
	})
	return cs, c, stdin
}

func TestMCPDisconnect(t *testing.T) {
	e := newDaemonEnv(t)
	cs, c, stdin := mcpClientRaw(t, e)
	dir := t.TempDir()
	// Left running past a yield: goes on after the client leaves.
	left := execOK(t, cs, map[string]any{"command": fmt.Sprintf("sleep 1.5; echo finished > %s/left", dir), "yield_ms": 100, "session": "left"})
	if left.Status != "running" {
		t.Fatalf("left job: %+v", left)
	}
	// Waited on when the client goes: stopped.
	done := make(chan *mcp.CallToolResult, 1)
	pids := startTree(t, cs, context.Background(), 10, filepath.Join(dir, "pids"), done)
	start := time.Now()
	stdin.Close() // EOF: the client is gone
	if !waitAllGone(pids, 10*time.Second) {
		t.Fatal("the tree the client was waiting on survived its disconnect")
	}
	t.Logf("disconnect -> tree gone in %v", time.Since(start))
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	select {
	case <-waited:
	case <-time.After(20 * time.Second):
		t.Fatal("corral mcp did not exit after its client left")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "left")); err != nil || string(b) != "finished\n" {
		t.Errorf("the job left past its yield did not finish: %q %v", b, err)
	}
	t.Logf("corral mcp exited %v after the disconnect", time.Since(start))
}

func TestMCPBadInputs(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"exec", map[string]any{}, "command"},
		{"exec", map[string]any{"command": "  "}, "command is required"},
		{"exec", map[string]any{"command": "true", "timeout_ms": -1}, "timeout_ms must not be negative"},
		{"exec", map[string]any{"command": "true", "yield_ms": 60000}, "yield_ms must be at most 55000"},
		{"exec", map[string]any{"command": "true", "session": "../x"}, "session"},
		{"exec", map[string]any{"command": "true", "session": "a", "oneshot": true}, "exclude"},
		{"exec", map[string]any{"command": "true", "cwd": "rel"}, "absolute"},
		{"exec", map[string]any{"command": "true", "env": map[string]any{"A-B": "1"}}, "variable name"},
		{"exec", map[string]any{"command": "true", "max_output_bytes": 1}, "max_output_bytes"},
		{"exec", map[string]any{"command": 5}, "command"},
		{"exec_wait", map[string]any{"job": "nope"}, "no such job"},
		{"exec_wait", map[string]any{}, "job"},
		{"exec_cancel", map[string]any{"job": "nope"}, "no such job"},
		{"kill_session", map[string]any{"name": "bad name"}, "name"},
		{"no_such_tool", map[string]any{}, "unknown tool"},
	} {
		r := call(t, cs, tc.tool, tc.args, nil)
		if !r.IsError || !strings.Contains(text(r), tc.want) {
			t.Errorf("%s %v: isError %v, %q (want %q)", tc.tool, tc.args, r.IsError, text(r), tc.want)
		}
	}
	o := execOK(t, cs, map[string]any{"command": "echo still serving"})
	if o.Output != "still serving\n" {
		t.Errorf("after bad inputs: %+v", o)
	}
	// An offset past the output.
	var w mcpserver.ExecOutput
	if r := call(t, cs, "exec_wait", map[string]any{"job": o.Job, "offset": 1000}, &w); !r.IsError {
		t.Errorf("offset past the end: %s", text(r))
	}
}

// TestMCPDaemonKilledUnderAJob: a daemon SIGKILLed between exec and
// exec_wait. The job ends at once as daemon_lost (its stream is gone; the
// reply says so); the next call starts a daemon, which takes the session
// over. What became of the command's tree is logged.
func TestMCPDaemonKilledUnderAJob(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	dir := t.TempDir()
	o := execOK(t, cs, map[string]any{"command": fmt.Sprintf("echo before; sleep 2 & echo $! > %s/pid; wait; echo after > %s/after", dir, dir), "yield_ms": 300})
	if o.Status != "running" || o.Output != "before\n" {
		t.Fatalf("%+v", o)
	}
	sleepPid := testproc.PidFile(t, filepath.Join(dir, "pid"), 5*time.Second)
	e.killDaemon()
	start := time.Now()
	var w mcpserver.ExecOutput
	r := call(t, cs, "exec_wait", map[string]any{"job": o.Job, "yield_ms": 10000}, &w)
	t.Logf("exec_wait after the daemon's SIGKILL (%v): %s", time.Since(start), text(r))
	if r.IsError || w.Status != "done" || w.Outcome != "daemon_lost" || !strings.Contains(w.Error, "lost the daemon") {
		t.Errorf("exec_wait after SIGKILL: %+v", w)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("exec_wait took %v after the daemon died", time.Since(start))
	}
	// The next call starts a daemon, which takes the session over.
	o = execOK(t, cs, map[string]any{"command": "echo again"})
	if o.Output != "again\n" || o.Session != w.Session {
		t.Errorf("after the daemon restart: %+v", o)
	}
	alive := testproc.Alive(sleepPid)
	time.Sleep(2500 * time.Millisecond)
	_, err := os.Stat(filepath.Join(dir, "after"))
	t.Logf("after the restart: the command's sleep alive: %v; its last line ran: %v", alive, err == nil)
}

// mcpHTTP starts "corral mcp --http 127.0.0.1:PORT" and returns its URL and
// token once it serves.
func mcpHTTP(t *testing.T, e *daemonEnv) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := cli(t, e.mark, e.state, "mcp", "--http", addr)
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("corral mcp --http does not listen")
		}
	}
	b, err := os.ReadFile(filepath.Join(e.state, "mcp-token"))
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(e.state, "mcp-token"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mcp-token mode %v", fi.Mode())
	}
	return "http://" + addr + "/mcp", strings.TrimSpace(string(b))
}

type bearerRT struct {
	token string
	next  http.RoundTripper // nil: http.DefaultTransport
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.next != nil {
		return b.next.RoundTrip(r)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestMCPHTTP(t *testing.T) {
	e := newDaemonEnv(t)
	url, token := mcpHTTP(t, e)
	// Without the token, or with another: 401.
	for _, auth := range []string{"", "Bearer nope", "Basic " + token} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %s", auth, resp.Status)
		}
	}
	// A refused connection is closed, not kept alive: any local user can
	// reach a loopback port, and 20,000 kept-alive refused connections
	// used up the server's descriptors, locking the agent out.
	for i := 0; i < 50; i++ {
		c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if !strings.Contains(string(b), "401") || err != nil {
			t.Fatalf("a refused keep-alive request: %q %v (want a 401 and the connection closed)", b, err)
		}
	}
	hc := &http.Client{Transport: bearerRT{token: token}}
	cl := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "0"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	o := execOK(t, cs, map[string]any{"command": "echo over http", "session": "web"})
	if o.Output != "over http\n" || o.Outcome != "exited" {
		t.Errorf("exec over http: %+v", o)
	}
	// Cancel over HTTP stops the tree too.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *mcp.CallToolResult, 1)
	pids := startTree(t, cs, ctx, 10, filepath.Join(t.TempDir(), "pids"), done)
	start := time.Now()
	cancel()
	if !waitAllGone(pids, 10*time.Second) {
		t.Fatal("tree alive 10s after the cancel over http")
	}
	t.Logf("http: cancel -> tree gone in %v", time.Since(start))
	<-done
	// The token is kept: a second server reads the same one.
	if _, again := mcpHTTP(t, e); again != token {
		t.Errorf("second server's token differs")
	}
}

func TestMCPJobOutlivesItsServer(t *testing.T) {
	e := newDaemonEnv(t)
	cs, c := mcpClient(t, e)
	o := execOK(t, cs, map[string]any{"command": "echo early; sleep 0.7; echo late; sh -c 'exit 4'", "yield_ms": 100})
	if o.Status != "running" {
		t.Fatalf("%+v", o)
	}
	// The client leaves while no call waits: the job runs on, and the
	// server exits once it has ended.
	start := time.Now()
	cs.Close()
	c.Wait()
	t.Logf("the first server exited %v after its client left", time.Since(start))
	cs2, _ := mcpClient(t, e)
	var w mcpserver.ExecOutput
	r := call(t, cs2, "exec_wait", map[string]any{"job": o.Job, "offset": 0}, &w)
	if r.IsError || w.Status != "done" || w.Output != "early\nlate\n" || w.ExitCode == nil || *w.ExitCode != 4 || w.Outcome != "exited" {
		t.Errorf("exec_wait on the next server: %s %+v", text(r), w)
	}
	r = call(t, cs2, "exec_wait", map[string]any{"job": o.Job, "offset": 6}, &w)
	if w.Output != "late\n" {
		t.Errorf("offset 6: %q", w.Output)
	}
}

func TestMCPSeparateStderr(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	o := execOK(t, cs, map[string]any{"command": "echo o1; echo e1 >&2; sleep 0.5; echo o2; echo e2 >&2",
		"separate_stderr": true, "yield_ms": 250})
	if o.Stdout == nil || o.Stderr == nil || *o.Stdout != "o1\n" || *o.Stderr != "e1\n" {
		t.Fatalf("separate_stderr: %+v", o)
	}
	var w mcpserver.ExecOutput
	call(t, cs, "exec_wait", map[string]any{"job": o.Job}, &w)
	if w.Stdout == nil || *w.Stdout != "o2\n" || *w.Stderr != "e2\n" || w.Status != "done" {
		t.Errorf("exec_wait separate: %+v", w)
	}
	if o := execOK(t, cs, map[string]any{"command": "echo x"}); o.Stdout != nil || o.Stderr != nil {
		t.Errorf("stdout/stderr without separate_stderr: %+v", o)
	}
}

// connTracker dials TCP and remembers every connection, so a test can cut
// them all at once: a client gone without a word.
type connTracker struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *connTracker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *connTracker) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}

// TestMCPHTTPClientGone: over streamable HTTP a call's answer travels on
// the response of its POST; when that connection drops before the answer,
// no one can ever read it (corral keeps no event store for a resume), so
// the call is cancelled as if the client had sent notifications/cancelled:
// its tree is stopped, and another client finds the session idle.
func TestMCPHTTPClientGone(t *testing.T) {
	e := newDaemonEnv(t)
	url, token := mcpHTTP(t, e)
	var ct connTracker
	hc := &http.Client{Transport: bearerRT{token, &http.Transport{DialContext: ct.dial}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "0"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *mcp.CallToolResult, 1)
	pids := startTree(t, cs, context.Background(), 10, filepath.Join(t.TempDir(), "pids"), done)
	cut := time.Now()
	ct.cut()
	if !waitAllGone(pids, 10*time.Second) {
		t.Fatal("the tree runs on 10 s after its HTTP client's connections were cut")
	}
	t.Logf("connections cut -> tree gone in %v", time.Since(cut).Round(time.Millisecond))
	cs2, err := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "0"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT{token: token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close()
	// The cancelled job's session settles (its shell is reset, as after a
	// timeout) and is then idle.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ss mcpserver.SessionsOutput
		call(t, cs2, "sessions", nil, &ss)
		busy := ""
		for _, s := range ss.Sessions {
			if s.Busy {
				busy = s.Name + " (job " + s.Job + ")"
			}
		}
		if busy == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s is still busy 20 s after its client went away", busy)
		}
	}
	<-done
	cs.Close()
}

func TestMCPSigtermStopsItsJobs(t *testing.T) {
	e := newDaemonEnv(t)
	cs, c, _ := mcpClientRaw(t, e)
	done := make(chan *mcp.CallToolResult, 1)
	pids := startTree(t, cs, context.Background(), 10, filepath.Join(t.TempDir(), "pids"), done)
	start := time.Now()
	c.Process.Signal(syscall.SIGTERM)
	if !waitAllGone(pids, 10*time.Second) {
		t.Fatal("the tree survived corral mcp's SIGTERM")
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	select {
	case err := <-exited:
		t.Logf("SIGTERM: tree gone and corral mcp exited (%v) in %v", err, time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("corral mcp did not exit within 10s of SIGTERM")
	}
}
