//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tmuxtest"
)

// termEnv is the environment a terminal session's program gets in these
// tests, the same as in the tmux pane it is compared with.
func termShEnv() []string {
	return []string{"--env", "PS1=$ ", "--env", "LANG=C.UTF-8", "--env", "LC_ALL=C.UTF-8", "--env", "ENV="}
}

// must runs corral and fails the test unless it exits 0.
func (e *daemonEnv) must(args ...string) string {
	e.t.Helper()
	out, errs, rc := e.run(args...)
	if rc != 0 {
		log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
		e.t.Fatalf("corral %s: %d %s\ndaemon.log:\n%s", strings.Join(args, " "), rc, errs, log)
	}
	return out
}

// screenRows is the screen's text without its trailing blank rows.
func screenRows(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// needTmux skips the test where tmux is not installed.
func needTmux(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: apt-get install tmux")
	}
}

// tmuxServer starts a private tmux server whose one session, "s", runs
// argv in a cols×rows pane (the oracle of a screen, or the user's outer
// terminal), and returns how to run a tmux command on that server (a
// failure fails t); cleanup kills that server.
func tmuxServer(t *testing.T, mark string, cols, rows int, argv ...string) func(args ...string) string {
	t.Helper()
	srv := tmuxtest.New(t, testproc.TempDir(t), "set -g status off\nset -g exit-empty off\nset -g default-terminal xterm-256color\nset -g escape-time 0\n",
		append(testproc.Env(mark), "LANG=C.UTF-8", "LC_ALL=C.UTF-8"))
	srv.Run(append([]string{"new-session", "-d", "-s", "s", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows)}, argv...)...)
	return srv.Run
}

// TestTermVerbsMatchTmux: a program opened with term open shows on term
// screen what it shows in a tmux pane of the same size (colour, wide
// characters, scrolling); term send types text and keys, term wait
// returns on text, quiet output and the exit (with its status), 124 on a
// timeout; ls lists the kind; kill ends it.
func TestTermVerbsMatchTmux(t *testing.T) {
	e := newDaemonEnv(t)
	prog := `seq 1 30; printf '\033[31mred\033[0m wide: 日本語 tab:\tend\n'; printf 'done\n'; exec sleep 600`
	tmux := tmuxServer(t, e.mark, 60, 12, "sh -c '"+strings.ReplaceAll(prog, "'", `'\''`)+"'")
	capture := func() string { return tmux("capture-pane", "-p", "-t", "s") }
	e.must(append(append([]string{"term", "open", "oracle", "--size", "60x12"}, termShEnv()...), "--", "sh", "-c", prog)...)
	e.must("term", "wait", "oracle", "--text", "^done", "--timeout", "10s")
	var want string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if want = screenRows(capture()); strings.Contains(want, "done") || time.Now().After(deadline) {
			break
		}
	}
	got := screenRows(e.must("term", "screen", "oracle"))
	if got != want {
		t.Fatalf("term screen and tmux differ:\ncorral:\n%s\ntmux:\n%s", got, want)
	}
	if ansi := e.must("term", "screen", "oracle", "--ansi"); !strings.Contains(ansi, "\x1b[") || !strings.Contains(ansi, "red") {
		t.Errorf("--ansi has no attributes: %q", ansi)
	}
	var js map[string]any
	if err := json.Unmarshal([]byte(e.must("term", "screen", "oracle", "--json", "--scrollback", "5")), &js); err != nil {
		t.Fatal(err)
	}
	if js["cols"] != 60.0 || js["rows"] != 12.0 || js["exited"] != false || len(js["scrollback"].([]any)) != 5 {
		t.Errorf("screen --json: %v", js)
	}

	// A shell, driven by text and keys.
	e.must(append(append([]string{"term", "open", "sh"}, termShEnv()...), "--", "sh")...)
	e.must("term", "wait", "sh", "--text", `^\$ ?$`, "--timeout", "10s")
	e.must("term", "send", "sh", "echo", "sum=$((40+2))")
	e.must("term", "send", "sh", "--keys", "Enter")
	if out := e.must("term", "wait", "sh", "--text", "^sum=[0-9]+", "--timeout", "10s"); out != "sum=42\n" {
		t.Errorf("wait --text printed %q", out)
	}
	// ctrl-c interrupts the foreground job, as in a terminal.
	e.must("term", "send", "sh", "sleep 600; echo after")
	e.must("term", "send", "sh", "--keys", "Enter")
	e.must("term", "wait", "sh", "--idle", "300ms", "--timeout", "10s")
	e.must("term", "send", "sh", "--keys", "C-c")
	e.must("term", "wait", "sh", "--text", `(?s)sleep 600.*\n\$ ?$`, "--timeout", "10s")
	if _, _, rc := e.run("term", "wait", "sh", "--text", "never-there", "--timeout", "300ms"); rc != 124 {
		t.Errorf("a wait that times out: %d, want 124", rc)
	}
	e.must("exec", "-s", "ex", "--", "true")
	ls := e.ls()
	if ls["sh"].State != "up" || ls["ex"].State != "up" {
		t.Fatalf("ls: %+v", ls)
	}
	out := e.must("ls", "--json")
	var list []map[string]any
	json.Unmarshal([]byte(out), &list)
	kinds := map[string]any{}
	for _, s := range list {
		kinds[s["name"].(string)] = s["kind"]
	}
	if kinds["sh"] != "terminal" || kinds["oracle"] != "terminal" || kinds["ex"] != "exec" {
		t.Errorf("ls --json kinds: %v", kinds)
	}
	if table := e.must("ls"); !strings.HasPrefix(table, "NAME") || !regexp.MustCompile(`(?m)^sh\s+terminal\s+up\s`).MatchString(table) ||
		!regexp.MustCompile(`(?m)^ex\s+exec\s+up\s`).MatchString(table) {
		t.Errorf("ls:\n%s", table)
	}
	// The exit, with its status.
	e.must("term", "send", "sh", "exit 7")
	e.must("term", "send", "sh", "--keys", "Enter")
	if _, _, rc := e.run("term", "wait", "sh", "--exit", "--timeout", "10s"); rc != 7 {
		t.Errorf("wait --exit: %d, want the program's 7", rc)
	}
	if s := e.ls()["sh"]; s.State != "exited" {
		t.Errorf("after the exit ls says %+v", s)
	}
	if _, errs, rc := e.run("term", "open", "sh"); rc != 2 || !strings.Contains(errs, "exited (status 7)") {
		t.Errorf("term open of an exited session: %d %q", rc, errs)
	}
	if out := e.must("term", "screen", "sh"); !strings.Contains(out, "exit 7") {
		t.Errorf("the exited program's last screen: %q", out)
	}
}

// TestTermBadInputs: each bad input is refused with an error that says
// what was wrong, and nothing is created.
func TestTermBadInputs(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "t", "--", "sh")
	e.must("exec", "-s", "x", "--", "true")
	for _, c := range []struct {
		args []string
		rc   int
		want string
	}{
		{[]string{"term", "open", "a", "--size", "80by24"}, 2, "want COLSxROWS"},
		{[]string{"term", "open", "a", "--size", "0x24"}, 2, "size"},
		{[]string{"term", "open", "a", "--size", "99999x24"}, 2, "size"},
		{[]string{"term", "open", "bad/name"}, 2, "invalid session name"},
		{[]string{"term", "open", "a", "--cwd", "/nonexistent/dir"}, 2, "/nonexistent/dir"},
		{[]string{"term", "open", "a", "--env", "NOEQUALS"}, 2, "NAME=VALUE"},
		{[]string{"term", "open", "a", "--size-policy", "biggest"}, 2, "size-policy"},
		{[]string{"term", "open", "a", "--", "/nonexistent/program"}, 2, "/nonexistent/program"},
		{[]string{"term", "open", "t"}, 2, "open already"},
		{[]string{"term", "open", "x"}, 2, "exec session"},
		{[]string{"term", "send", "t", "--keys", "Enterr"}, 2, `unknown key name "Enterr"`},
		{[]string{"term", "send", "t", "--keys", "C-é"}, 2, "C-é"},
		{[]string{"term", "send", "nosuch", "hi"}, 1, "no such session"},
		{[]string{"term", "screen", "nosuch"}, 1, "no such session"},
		{[]string{"term", "screen", "x"}, 2, "exec session"},
		{[]string{"term", "wait", "t"}, 2, "--text"},
		{[]string{"term", "wait", "t", "--text", "("}, 2, "--text"},
		{[]string{"term", "resize", "t", "80"}, 2, "COLSxROWS"},
		{[]string{"term", "resize", "nosuch", "80x24"}, 1, "no such session"},
		{[]string{"exec", "-s", "t", "--", "true"}, 2, "terminal session"},
		{[]string{"attach", "t", "--detach-keys", "ctrl-é"}, 2, "--detach-keys"},
		{[]string{"attach", "t"}, 2, "not a terminal"},
	} {
		_, errs, rc := e.run(c.args...)
		if rc != c.rc || !strings.Contains(errs, c.want) {
			t.Errorf("corral %s: %d %q, want %d and %q", strings.Join(c.args, " "), rc, errs, c.rc, c.want)
		}
	}
	ls := e.ls()
	if len(ls) != 2 {
		t.Errorf("bad inputs created sessions: %+v", ls)
	}
}

// TestTermKillEndsTheWholeTree: kill ends the holder, the program and
// what the program started (in the background, in a session of its own),
// and removes the session's record and directory.
func TestTermKillEndsTheWholeTree(t *testing.T) {
	e := newDaemonEnv(t)
	pids := filepath.Join(testproc.TempDir(t), "pids")
	e.must("term", "open", "k", "--", "sh", "-c", "sleep 600 & echo $! >"+pids+"; setsid sleep 600 & echo $! >>"+pids+"; echo started; wait")
	e.must("term", "wait", "k", "--text", "started", "--timeout", "10s")
	var procs []int
	b, _ := os.ReadFile(pids)
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		procs = append(procs, n)
	}
	var info []map[string]any
	json.Unmarshal([]byte(e.must("ls", "--json")), &info)
	if len(info) != 1 || len(procs) != 2 {
		t.Fatalf("ls %v, children %v", info, procs)
	}
	procs = append(procs, int(info[0]["holder_pid"].(float64)), int(info[0]["shell_pid"].(float64)))
	for _, p := range procs {
		if p == 0 || !testproc.Alive(p) {
			t.Fatalf("process %d of %v not running", p, procs)
		}
	}
	e.must("kill", "k")
	for _, p := range procs {
		if !waitGone(p, 10*time.Second) {
			t.Errorf("%d outlived the kill of its terminal session", p)
		}
	}
	if _, err := os.Stat(filepath.Join(e.state, "sessions", "k")); !os.IsNotExist(err) {
		t.Errorf("the session's directory is left: %v", err)
	}
	if _, errs, rc := e.run("term", "screen", "k"); rc != 1 {
		t.Errorf("screen after kill: %d %s", rc, errs)
	}
}

// TestTermSurvivesDaemonKill: the daemon is SIGKILLed while a program
// runs and a client is attached: the client's stream ends, the program
// and its holder go on, and after the next daemon takes the holder over
// a new attach shows the output produced while no daemon ran.
func TestTermSurvivesDaemonKill(t *testing.T) {
	e := newDaemonEnv(t)
	flag := filepath.Join(testproc.TempDir(t), "go")
	// The program prints a line once flag exists: output made while no
	// daemon runs.
	e.must("term", "open", "s", "--", "sh", "-c", "echo ready; while [ ! -e "+flag+" ]; do sleep 0.05; done; echo made-meanwhile; exec sleep 600")
	e.must("term", "wait", "s", "--text", "ready", "--timeout", "10s")
	before := e.ls()["s"]
	c := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := attach80x24(t, ctx, c, "s")
	var first strings.Builder
	buf := make([]byte, 64<<10)
	for !strings.Contains(first.String(), "ready") {
		n, err := a.Read(buf)
		first.Write(buf[:n])
		if err != nil {
			t.Fatalf("attach: %v, got %q", err, first.String())
		}
	}
	e.killDaemon()
	if _, err := io.Copy(io.Discard, a); err == nil {
		t.Error("the attached stream ended cleanly with its daemon killed")
	}
	a.Close()
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	after := e.ls()["s"] // a new daemon, which takes the holder over
	if after.State != "up" || after.ShellPid != before.ShellPid {
		log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
		t.Fatalf("after the daemon's kill: %+v, before %+v\n%s", after, before, log)
	}
	c2 := e.dial()
	a2 := attach80x24(t, ctx, c2, "s")
	var redraw strings.Builder
	for !strings.Contains(redraw.String(), "made-meanwhile") {
		n, err := a2.Read(buf)
		redraw.Write(buf[:n])
		if err != nil {
			t.Fatalf("reattach: %v, got %q", err, redraw.String())
		}
	}
	if !strings.Contains(redraw.String(), "ready") {
		t.Errorf("the redraw lost the screen from before the kill: %q", redraw.String())
	}
	if err := a2.Detach(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, a2); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if exited, _ := a2.Exited(); exited {
		t.Error("a detach reported an exit")
	}
	a2.Close()
	if out := e.must("term", "screen", "s"); !strings.Contains(out, "ready\nmade-meanwhile") {
		t.Errorf("screen after the take-over: %q", out)
	}
}

// TestTermRebootRestarts: after a reboot (the daemon stopped, the holder
// and program gone, the state directory kept) the session lists down,
// the verbs say so and how to start it, and term open starts its command
// afresh in its saved cwd, environment and size.
func TestTermRebootRestarts(t *testing.T) {
	e := newDaemonEnv(t)
	dir := t.TempDir()
	e.must("term", "open", "r", "--cwd", dir, "--env", "SAVED=kept", "--size", "100x30", "--", "sh", "-c", `echo "in $PWD with $SAVED"; exec sleep 600`)
	e.must("term", "wait", "r", "--text", "in ", "--timeout", "10s")
	var info []map[string]any
	json.Unmarshal([]byte(e.must("ls", "--json")), &info)
	holder, prog := int(info[0]["holder_pid"].(float64)), int(info[0]["shell_pid"].(float64))
	e.must("daemon", "stop")
	if !testproc.Alive(holder) || !testproc.Alive(prog) {
		t.Fatal("stopping the daemon ended a terminal session")
	}
	// The reboot: both gone (ours: recorded by our daemon).
	syscall.Kill(prog, syscall.SIGKILL)
	syscall.Kill(holder, syscall.SIGKILL)
	waitGone(prog, 5*time.Second)
	waitGone(holder, 5*time.Second)
	if s := e.ls()["r"]; s.State != "down" {
		t.Fatalf("after the reboot: %+v", s)
	}
	if _, errs, rc := e.run("term", "screen", "r"); rc != 2 || !strings.Contains(errs, "down") || !strings.Contains(errs, "term open r") {
		t.Errorf("screen of a down session: %d %q", rc, errs)
	}
	e.must("term", "open", "r")
	want := fmt.Sprintf("in %s with kept", dir)
	e.must("term", "wait", "r", "--text", regexp.QuoteMeta(want), "--timeout", "10s")
	var js map[string]any
	json.Unmarshal([]byte(e.must("term", "screen", "r", "--json")), &js)
	if js["cols"] != 100.0 || js["rows"] != 30.0 {
		t.Errorf("restarted at %vx%v, want the saved 100x30", js["cols"], js["rows"])
	}
	if s := e.ls()["r"]; s.State != "up" || s.ShellPid == prog {
		t.Errorf("after the restart: %+v", s)
	}
}

// screenSize is the session's window size as term screen --json says.
func (e *daemonEnv) screenSize(name string) string {
	e.t.Helper()
	var js map[string]any
	json.Unmarshal([]byte(e.must("term", "screen", name, "--json")), &js)
	return fmt.Sprintf("%vx%v", js["cols"], js["rows"])
}

// dial connects a client to e's daemon; cleanup closes it.
func (e *daemonEnv) dial() *client.Client {
	e.t.Helper()
	c, err := client.Dial(context.Background(), e.state)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// attach80x24 attaches c to session name at 80×24 (ctx bounds the
// attach, not the attachment); the caller closes the attachment.
func attach80x24(t *testing.T, ctx context.Context, c *client.Client, name string) *client.TermAttachment {
	t.Helper()
	a, err := c.TermAttach(ctx, name, client.TermAttachOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// attachAs attaches a client of the given size and reads its redraw.
func attachAs(t *testing.T, c *client.Client, name string, cols, rows int) *client.TermAttachment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := c.TermAttach(ctx, name, client.TermAttachOptions{Cols: cols, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	go io.Copy(io.Discard, a)
	return a
}

// waitSize waits until the session's window is want.
func (e *daemonEnv) waitSize(name, want, why string) {
	e.t.Helper()
	got := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = e.screenSize(name); got == want {
			return
		}
	}
	e.t.Fatalf("%s: the window is %s, want %s", why, got, want)
}

// TestTermSizePolicies: by default the window takes the size of the
// most recent client that typed; smallest and largest follow the
// attached clients; fixed changes only with term resize. The program
// sees each size (stty size in it).
func TestTermSizePolicies(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "typed", "--size", "50x10", "--", "sh")
	c := e.dial()
	a := attachAs(t, c, "typed", 100, 30)
	e.waitSize("typed", "100x30", "a client attached")
	b := attachAs(t, c, "typed", 70, 20)
	e.waitSize("typed", "70x20", "a second client attached")
	a.Write([]byte("stty size\r"))
	e.waitSize("typed", "100x30", "the first client typed")
	e.must("term", "wait", "typed", "--text", "^30 100", "--timeout", "10s")
	b.Write([]byte(" "))
	e.waitSize("typed", "70x20", "the second client typed")

	e.must("term", "open", "small", "--size-policy", "smallest", "--", "sh")
	attachAs(t, c, "small", 120, 20)
	attachAs(t, c, "small", 90, 40)
	e.waitSize("small", "90x20", "smallest of 120x20 and 90x40")

	e.must("term", "open", "big", "--size-policy", "largest", "--", "sh")
	attachAs(t, c, "big", 120, 20)
	d := attachAs(t, c, "big", 90, 40)
	e.waitSize("big", "120x40", "largest of 120x20 and 90x40")
	d.Close()
	e.waitSize("big", "120x20", "the 90x40 client left")

	e.must("term", "open", "fixed", "--size-policy", "fixed", "--size", "60x15", "--", "sh")
	f := attachAs(t, c, "fixed", 120, 40)
	f.Write([]byte(" "))
	time.Sleep(300 * time.Millisecond)
	if got := e.screenSize("fixed"); got != "60x15" {
		t.Errorf("a fixed window took a client's size: %s", got)
	}
	e.must("term", "resize", "fixed", "61x16")
	e.waitSize("fixed", "61x16", "term resize of a fixed window")
}

// TestTermHolderDeathAndOrphans: a holder that dies makes its session
// down and takes its program with it; after a daemon kill, a holder that
// is ours by its identity but no longer serves its session (its socket
// gone) is an orphan: the next daemon kills it and its program, and
// leaves the session down, to be opened again.
func TestTermHolderDeathAndOrphans(t *testing.T) {
	e := newDaemonEnv(t)
	pids := func(name string) (int, int) {
		var info []map[string]any
		json.Unmarshal([]byte(e.must("ls", "--json")), &info)
		for _, s := range info {
			if s["name"] == name {
				h, _ := s["holder_pid"].(float64)
				p, _ := s["shell_pid"].(float64)
				return int(h), int(p)
			}
		}
		return 0, 0
	}
	e.must("term", "open", "dies", "--", "sleep", "600")
	h, p := pids("dies")
	if h == 0 || p == 0 {
		t.Fatalf("no holder or program: %d %d", h, p)
	}
	syscall.Kill(h, syscall.SIGKILL) // ours: the daemon we started started it
	if !waitGone(p, 10*time.Second) {
		t.Fatalf("the program %d outlived its holder", p)
	}
	for deadline := time.Now().Add(10 * time.Second); e.ls()["dies"].State != "down"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after its holder died: %+v", e.ls()["dies"])
		}
	}

	e.must("term", "open", "orphan", "--", "sleep", "600")
	h, p = pids("orphan")
	e.killDaemon()
	if err := os.Remove(filepath.Join(e.state, "sessions", "orphan", "sock")); err != nil {
		t.Fatal(err)
	}
	if s := e.ls()["orphan"]; s.State != "down" { // the next daemon
		t.Errorf("an orphaned holder's session: %+v", s)
	}
	for _, pid := range []int{h, p} {
		if !waitGone(pid, 10*time.Second) {
			t.Errorf("%d of the orphaned holder's tree outlived the next daemon's start", pid)
		}
	}
	if log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log")); !strings.Contains(string(log), "orphaned terminal holder") {
		t.Errorf("the orphan's kill is not logged:\n%s", log)
	}
	e.must("term", "open", "orphan")
	if s := e.ls()["orphan"]; s.State != "up" {
		t.Errorf("reopened: %+v", s)
	}
}

// TestAttachInATerminal: corral attach in a real terminal (a tmux pane
// as the outer terminal) creates the session, draws it, sends what is
// typed; ctrl-\ detaches (status 0) and undoes the modes the program
// set on the outer terminal (the alternate screen); a second attach
// redraws the same screen; the program's exit ends attach with its
// status.
func TestAttachInATerminal(t *testing.T) {
	e := newDaemonEnv(t)
	attach := fmt.Sprintf("CORRAL_STATE_DIR=%s %s attach work -- env PS1='$ ' sh; echo \"rc=$?\"; exec sleep 600", e.state, corralBin)
	tmux := tmuxServer(t, e.mark, 80, 24, "sh", "-c", attach)
	pane := func(want, why string) string {
		t.Helper()
		var got string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if got = tmux("capture-pane", "-p", "-t", "s"); regexp.MustCompile(want).MatchString(got) {
				return got
			}
		}
		t.Fatalf("%s: %q never showed in the outer terminal:\n%s", why, want, got)
		return ""
	}
	pane(`(?m)^\$`, "the attached shell's prompt")
	tmux("send-keys", "-t", "s", "echo typed-$((1+1))", "Enter")
	pane(`(?m)^typed-2`, "what was typed")
	// The program turns the alternate screen on; detaching turns it off.
	tmux("send-keys", "-t", "s", `printf '\033[?1049h'; echo in-alt`, "Enter")
	pane(`(?m)^in-alt`, "the alternate screen")
	if got := strings.TrimSpace(tmux("display", "-p", "-t", "s", "#{alternate_on}")); got != "1" {
		t.Fatalf("the outer terminal's alternate screen is %q while attached", got)
	}
	tmux("send-keys", "-t", "s", `C-\`)
	pane(`(?m)^rc=0`, "attach's status after a detach")
	if got := strings.TrimSpace(tmux("display", "-p", "-t", "s", "#{alternate_on}")); got != "0" {
		t.Errorf("after the detach the outer terminal's alternate screen is %q: the mode leaked", got)
	}
	if s := e.ls()["work"]; s.State != "up" {
		t.Fatalf("after the detach: %+v", s)
	}
	// Reattach from a new pane: the same screen at once.
	e.must("term", "send", "work", `printf '\033[?1049l'; clear; echo back-again`)
	e.must("term", "send", "work", "--keys", "Enter")
	e.must("term", "wait", "work", "--text", "^back-again", "--timeout", "10s")
	again := fmt.Sprintf("CORRAL_STATE_DIR=%s %s attach work; echo \"rc=$?\"; exec sleep 600", e.state, corralBin)
	tmux("respawn-pane", "-k", "-t", "s", "sh", "-c", again)
	pane(`(?m)^back-again`, "the redraw on reattach")
	tmux("send-keys", "-t", "s", "exit 3", "Enter")
	pane(`(?m)^rc=3`, "attach's status after the program's exit")
}

// TestTermDaemonStopKeepsSessions: daemon stop lets the holders go on,
// and the next daemon takes each over: same holder, same program, same
// screen.
func TestTermDaemonStopKeepsSessions(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "keep", "--", "sh", "-c", "echo kept-screen; exec sleep 600")
	e.must("term", "wait", "keep", "--text", "kept-screen", "--timeout", "10s")
	before := e.ls()["keep"]
	e.must("daemon", "stop")
	if !testproc.Alive(before.ShellPid) {
		t.Fatal("daemon stop ended the terminal session's program")
	}
	if after := e.ls()["keep"]; after.State != "up" || after.ShellPid != before.ShellPid {
		t.Fatalf("after a restart: %+v, before %+v", after, before)
	}
	if out := e.must("term", "screen", "keep"); !strings.HasPrefix(out, "kept-screen\n") {
		t.Errorf("the screen after a restart: %q", out)
	}
	if log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log")); !strings.Contains(string(log), "took over terminal holder") {
		t.Errorf("no take-over logged:\n%s", log)
	}
}

// TestTermStoppedHolderIsNotKilled: a holder that is ours but does not
// answer (SIGSTOPped) when a new daemon starts is not an orphan to kill
// on a doubt: its session is broken, the holder left alone, until a kill.
func TestTermStoppedHolderIsNotKilled(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "st", "--", "sleep", "600")
	var info []map[string]any
	json.Unmarshal([]byte(e.must("ls", "--json")), &info)
	holder := int(info[0]["holder_pid"].(float64))
	e.killDaemon()
	syscall.Kill(holder, syscall.SIGSTOP) // ours: started by our daemon
	defer syscall.Kill(holder, syscall.SIGCONT)
	var s lsEntry
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if s = e.ls()["st"]; s.State == "broken" || time.Now().After(deadline) {
			break
		}
	}
	if s.State != "broken" || !testproc.Alive(holder) {
		t.Fatalf("a stopped holder after a restart: %+v, alive %v", s, testproc.Alive(holder))
	}
	if _, errs, rc := e.run("term", "screen", "st"); rc == 0 || !strings.Contains(errs, "broken") {
		t.Errorf("screen of a broken session: %d %q", rc, errs)
	}
	e.must("kill", "st")
	if !waitGone(holder, 10*time.Second) {
		t.Error("kill left the stopped holder")
	}
}

// TestTermStalledClientStallsNoOne: through the daemon, an attached
// client that reads nothing while the program floods its terminal slows
// neither the program nor another attached client nor the daemon's other
// calls.
func TestTermStalledClientStallsNoOne(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "flood", "--", "sh", "-c", "read x; exec yes flooding-the-terminal")
	c := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stalled := attach80x24(t, ctx, c, "flood")
	defer stalled.Close()
	live := attach80x24(t, ctx, c, "flood")
	defer live.Close()
	e.must("term", "send", "flood", "--keys", "Enter")
	// Far more than every buffer between the program and the stalled
	// client (the holder's 1 MiB queue, two sockets of a few hundred KiB)
	// must reach the live one while the stalled one reads nothing (8 MiB:
	// an emulated VM delivers about 12 MB in 40 s, and once 7.96 MB, so
	// it is given 55 s).
	const want = 8 << 20
	buf := make([]byte, 64<<10)
	got := 0
	start := time.Now()
	for got < want {
		n, err := live.Read(buf)
		got += n
		if err != nil {
			t.Fatalf("the live client after %d bytes: %v", got, err)
		}
		if time.Since(start) > 55*time.Second {
			t.Fatalf("the live client got only %d bytes in 55s beside a stalled one", got)
		}
	}
	t.Logf("%d MiB to the live client in %v beside a stalled one", got>>20, time.Since(start).Round(time.Millisecond))
	// The daemon answers other calls meanwhile.
	if out := e.must("term", "screen", "flood"); !strings.Contains(out, "flooding-the-terminal") {
		t.Errorf("screen during the flood: %q", out)
	}
	// The stalled client, once it reads, catches up from a redraw.
	var seen strings.Builder
	for !strings.Contains(seen.String(), "flooding-the-terminal") {
		n, err := stalled.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("the stalled client: %v", err)
		}
	}
	e.must("kill", "flood")
}

// TestTermCursorKeyMode: named cursor keys reach the program as its
// cursor-key mode wants: CSI (ESC [ A) normally, SS3 (ESC O A) once it
// asked for application cursor keys (DECCKM, as vim and less do).
func TestTermCursorKeyMode(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "keys", "--", "sh", "-c",
		`stty raw -echo opost onlcr; printf 'ready\n'; head -c 3 | od -An -c; printf '\033[?1hmode\n'; head -c 3 | od -An -c; exec sleep 600`)
	e.must("term", "wait", "keys", "--text", "^ready", "--timeout", "10s")
	e.must("term", "send", "keys", "--keys", "Up")
	e.must("term", "wait", "keys", "--text", `^mode`, "--timeout", "10s")
	e.must("term", "send", "keys", "--keys", "Up")
	e.must("term", "wait", "keys", "--text", `(?s)mode.*033`, "--timeout", "10s")
	scr := e.must("term", "screen", "keys")
	if !regexp.MustCompile(`(?s)ready\n\s*033\s+\[\s+A\s*\nmode\n\s*033\s+O\s+A`).MatchString(scr) {
		t.Errorf("Up in normal, then application cursor-key mode:\n%s", scr)
	}
}
