//go:build linux

package terminal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/holder"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/vt"
)

func TestShellMatchesTmux(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	argv := []string{"/bin/sh"}
	tm := openTest(t, mark, Config{Path: argv[0], Args: argv})
	p := newPane(t, mark, 80, 24, progEnv(mark), argv...)
	compare(t, tm, p, []string{
		"echo hello world\r",
		"printf '\\033[1;31mred\\033[0m 世界 wide\\n'\r",
		"for i in $(seq 1 40); do echo line $i; done\r",
		"printf 'a\\tb\\tc\\n'\r",
	})
}

func TestVimMatchesTmux(t *testing.T) {
	need(t, "vim")
	mark := testproc.Guard(t, 2*time.Minute)
	file := filepath.Join(testproc.TempDir(t), "file.txt")
	var b strings.Builder
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&b, "line %d of the file\n", i)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := []string{"vim", "-u", "NONE", "-i", "NONE", "-N", "-n", file}
	tm := openTest(t, mark, Config{Path: argv[0], Args: argv})
	p := newPane(t, mark, 80, 24, progEnv(mark), argv...)
	compare(t, tm, p, []string{"Go", "typed line with 世界", "\x1b", ":split\r", "gg", "10j", "/line 30\r"})
	s, err := tm.Screen(ctx10(t), ScreenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.AltScreen {
		t.Error("vim runs on the alternate screen, the holder says it does not")
	}
	// Out of vim: the main screen is back, in both.
	compare(t, tm, p, []string{":qa!\r"})
	if r, err := tm.Wait(ctx10(t), WaitOptions{Exit: true, Timeout: 8 * time.Second}); err != nil || r.Reason != "exit" || r.Status.ExitCode != 0 {
		t.Fatalf("vim's exit: %+v, %v", r, err)
	}
}

func TestLessMatchesTmux(t *testing.T) {
	need(t, "less")
	mark := testproc.Guard(t, 2*time.Minute)
	file := filepath.Join(testproc.TempDir(t), "colour.txt")
	var b strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&b, "\x1b[3%dmline %d\x1b[0m in colour\n", i%8, i)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := []string{"less", "-R", file}
	tm := openTest(t, mark, Config{Path: argv[0], Args: argv})
	p := newPane(t, mark, 80, 24, progEnv(mark), argv...)
	compare(t, tm, p, []string{" ", " ", "/line 150\r", "n", "b", "q"})
}

// top's numbers change from one moment to the next; its header rows and
// its column headings do not, and both must be where tmux has them.
func TestTopMatchesTmux(t *testing.T) {
	need(t, "top")
	mark := testproc.Guard(t, 2*time.Minute)
	argv := []string{"top", "-d", "5"}
	tm := openTest(t, mark, Config{Path: argv[0], Args: argv, Cols: 100, Rows: 30})
	p := newPane(t, mark, 100, 30, progEnv(mark), argv...)
	waitText(t, tm, "PID USER")
	head := func(text string) (out []string) {
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "PID" {
				out = append(out, l)
			} else if len(f) > 1 && strings.HasSuffix(f[0], ":") {
				out = append(out, f[0])
			}
		}
		return out
	}
	// The two tops draw on their own schedules: the headings must come
	// to agree (and hold the summary rows and the column headings).
	var w, g []string
	var s *Screen
	deadline := time.Now().Add(15 * time.Second)
	for {
		want, _ := p.screen()
		var err error
		if s, err = tm.Screen(ctx10(t), ScreenOptions{}); err != nil {
			t.Fatal(err)
		}
		w, g = head(want), head(s.Text)
		if strings.Join(w, "|") == strings.Join(g, "|") && len(w) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top's headings differ:\n tmux   %q\n holder %q\nholder screen:\n%s", w, g, s.Text)
		}
	}
	if alt := strings.TrimSpace(p.Run("display", "-p", "-t", "s", "#{alternate_on}")) == "1"; alt != s.AltScreen {
		t.Errorf("alternate screen: tmux %v, holder %v", alt, s.AltScreen)
	}
}

func TestExitStatus(t *testing.T) {
	mark := testproc.Guard(t, time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"sh", "-c", "echo bye; exit 7"}})
	// The holder keeps no copy of the terminal but the one it closes
	// when the tree has settled: with one more (its descriptor 0, where
	// the program's start needs it) the end of the output, and so the
	// exit, came only after the 2 s drain bound.
	if fd0, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", tm.HolderPid())); err != nil || fd0 != os.DevNull {
		t.Errorf("the holder's descriptor 0 is %q (%v), want %s", fd0, err, os.DevNull)
	}
	r, err := tm.Wait(ctx10(t), WaitOptions{Exit: true, Timeout: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reason != "exit" || !r.Status.Exited || r.Status.ExitCode != 7 {
		t.Fatalf("wait: %+v, want the exit with status 7", r)
	}
	s, err := tm.Screen(ctx10(t), ScreenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Text, "bye\n") {
		t.Errorf("screen after exit:\n%s", s.Text)
	}
	st, err := tm.Close(ctx10(t))
	if err != nil || st.ExitCode != 7 {
		t.Fatalf("close: %+v, %v", st, err)
	}
}

func TestWaitTimeoutAndBadInput(t *testing.T) {
	mark := testproc.Guard(t, time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"sh"}})
	r, err := tm.Wait(ctx10(t), WaitOptions{Text: "never-shown", Timeout: 300 * time.Millisecond})
	if err != nil || r.Reason != "timeout" {
		t.Fatalf("wait for text that never comes: %+v, %v", r, err)
	}
	if _, err := tm.Wait(ctx10(t), WaitOptions{Text: "("}); !errors.Is(err, ErrHolder) || !strings.Contains(err.Error(), "bad text pattern") {
		t.Errorf("a bad pattern: %v", err)
	}
	if _, err := tm.Wait(ctx10(t), WaitOptions{}); err == nil || !strings.Contains(err.Error(), "give text, idle or exit") {
		t.Errorf("a wait for nothing: %v", err)
	}
	if err := tm.Resize(ctx10(t), 0, 24); err == nil || !strings.Contains(err.Error(), "between 1 and") {
		t.Errorf("a resize to 0 columns: %v", err)
	}
	// Resizing reaches the program (stty reads the PTY's size).
	if err := tm.Resize(ctx10(t), 100, 30); err != nil {
		t.Fatal(err)
	}
	tm.Send(ctx10(t), []byte("stty size\r"))
	waitText(t, tm, "(?m)^30 100$")
	if _, err := Open(ctx10(t), tm.Dir(), Config{Path: "/bin/sh"}); err == nil || !strings.Contains(err.Error(), "already serves") {
		t.Errorf("a second Open in the same directory: %v", err)
	}
}

func TestDirectoryRefused(t *testing.T) {
	mark := testproc.Guard(t, time.Minute)
	base := testproc.TempDir(t)
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	_, err := Open(ctx10(t), open, Config{Path: "/bin/sh", Holder: []string{os.Args[0]}, HolderEnv: append(testproc.Env(mark), holderEnv+"=1")})
	if err == nil || !strings.Contains(err.Error(), "unsafe") {
		t.Fatalf("a world-writable session directory: %v", err)
	}
	if _, err := Dial(ctx10(t), filepath.Join(base, "missing")); err == nil {
		t.Fatal("dial of a missing session worked")
	}
}

func TestAttachDetachReattach(t *testing.T) {
	need(t, "vim")
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"sh"}})
	waitText(t, tm, `(?m)^\$`)

	a, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := readAttachment(a, 80, 24)
	r.waitFor(t, "$")
	a.Write([]byte("echo one\r"))
	r.waitFor(t, "one\n$")
	// vim sets modes on the client's terminal: the alternate screen,
	// application cursor keys, bracketed paste (xterm-256color's vim).
	a.Write([]byte("vim -u NONE -i NONE -N -n\r"))
	r.waitFor(t, "~")
	a.Write([]byte("ihello from vim"))
	r.waitFor(t, "hello from vim")
	settle(t, tm)
	r.mu.Lock()
	modes := r.vt.Modes()
	r.mu.Unlock()
	if !modes.AltScreen {
		t.Fatal("vim did not put the client's terminal on the alternate screen")
	}
	if err := a.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := r.end(t); !errors.Is(err, ErrDetached) {
		t.Fatalf("read after detach: %v", err)
	}
	a.Close()
	// On detach every mode the program set is undone on the client's
	// terminal.
	after := r.vt.Modes()
	if after.AltScreen || after.CursorKeys || after.BracketedPaste || after.Mouse != 0 || !after.CursorVisible {
		t.Errorf("modes left on the client's terminal after detach: %+v", after)
	}

	// The program kept running: typing without a client reaches it.
	tm.Send(ctx10(t), []byte(" while detached"))
	waitText(t, tm, "hello from vim while detached")
	want, err := tm.Screen(ctx10(t), ScreenOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Reattach: the client's terminal shows the same screen and modes.
	a2, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r2 := readAttachment(a2, 80, 24)
	r2.waitFor(t, "hello from vim while detached")
	time.Sleep(200 * time.Millisecond)
	if got := r2.text(); got != want.Text {
		t.Errorf("screen after reattach differs from the session's:\n%s", diffRows(want.Text, got))
	}
	r2.mu.Lock()
	x, y, _ := r2.vt.Cursor()
	alt := r2.vt.Modes().AltScreen
	r2.mu.Unlock()
	if x != want.CursorX || y != want.CursorY || !alt {
		t.Errorf("reattached cursor %d,%d alt %v, session's %d,%d alt %v", x, y, alt, want.CursorX, want.CursorY, want.AltScreen)
	}
	// Quit vim and the shell: the attached client learns the exit.
	a2.Write([]byte("\x1b:q!\r"))
	r2.waitFor(t, "one\n$")
	a2.Write([]byte("exit 3\r"))
	if err := r2.end(t); err != io.EOF {
		t.Fatalf("read at the program's exit: %v", err)
	}
	if st := a2.Exit(); st == nil || st.ExitCode != 3 {
		t.Errorf("exit status seen by the attached client: %+v", st)
	}
	a2.Close()
}

// TestStalledClient: a client that stops reading under a flood stalls
// neither the program nor another client; once it reads again it is told
// it fell behind and gets the current screen.
func TestStalledClient(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"sh"}})
	waitText(t, tm, `(?m)^\$`)
	stalled, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	live, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	r := readAttachment(live, 80, 24)
	// 40 MB of output, far past the socket buffers and the client's
	// queue bound.
	tm.Send(ctx10(t), []byte("i=0; while [ $i -lt 40 ]; do head -c 1000000 /dev/zero | tr '\\0' x; i=$((i+1)); done; echo; echo flood-\"\"done\r"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := tm.Wait(ctx, WaitOptions{Text: "(?m)^flood-done$", Timeout: 50 * time.Second})
	if err != nil || res.Reason != "text" {
		t.Fatalf("the program stalled behind a client that does not read: %+v, %v", res, err)
	}
	r.waitFor(t, "flood-done")
	// The stalled client reads again: old output, then a resync and
	// the screen as it is now.
	rs := readAttachment(stalled, 80, 24)
	rs.waitFor(t, "flood-done")
	if stalled.Resyncs() == 0 {
		t.Error("the client that fell behind was never told (no resync)")
	}
	rs.mu.Lock()
	n := len(rs.raw)
	rs.mu.Unlock()
	if n > 8<<20 {
		t.Errorf("the stalled client was sent %d bytes: its queue is not bounded", n)
	}
	t.Logf("stalled client: %d resyncs, %d bytes read; live client resyncs %d", stalled.Resyncs(), n, live.Resyncs())
	stalled.Close()
	live.Close()
	rs.end(t)
	r.end(t)
}

// starterMain is a process that opens a session in dir, says so, and
// waits to be killed (the daemon of TestHolderSurvivesStarterKill).
func starterMain(dir string) int {
	tm, err := Open(context.Background(), dir, Config{Path: "/bin/sh", Args: []string{"sh"},
		Env: progEnv(os.Getenv(testproc.MarkerName)), Holder: []string{os.Args[0]},
		HolderEnv: append(os.Environ(), holderEnv+"=1")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tm.Send(context.Background(), []byte("echo started by $PPID; (sleep 1; echo produced while nobody owned it) &\r"))
	fmt.Println("ready")
	os.Stdout.Close()
	select {}
}

func TestHolderSurvivesStarterKill(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	dir := filepath.Join(testproc.TempDir(t), "sess")
	starter := exec.Command(os.Args[0])
	starter.Env = append(testproc.Env(mark), starterEnv+"="+dir)
	starter.Stderr = os.Stderr
	out, err := starter.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := starter.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _ := io.ReadFull(out, buf[:6])
	if string(buf[:n]) != "ready\n" {
		starter.Process.Kill()
		starter.Wait()
		t.Fatalf("starter: %q", buf[:n])
	}
	// The daemon dies the hard way while the program runs.
	starter.Process.Signal(syscall.SIGKILL)
	starter.Wait()

	tm, err := Dial(ctx10(t), dir)
	if err != nil {
		t.Fatalf("reconnect after the starter's SIGKILL: %v", err)
	}
	defer func() {
		if _, err := tm.Close(ctx10(t)); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if !testproc.Alive(tm.HolderPid()) {
		t.Fatal("holder gone")
	}
	// Output produced after the starter died is on the screen.
	waitText(t, tm, "produced while nobody owned it")
	a, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := readAttachment(a, 80, 24)
	r.waitFor(t, "produced while nobody owned it")
	a.Write([]byte("echo still here\r"))
	r.waitFor(t, "still here\n")
	a.Detach()
	r.end(t)
	a.Close()
	st, err := tm.Status(ctx10(t))
	if err != nil || st.Exited {
		t.Fatalf("status: %+v, %v", st, err)
	}
	// The tree was recorded before the program ran, where a new owner
	// finds it.
	if _, err := os.Stat(filepath.Join(dir, holder.TreeName)); err != nil {
		t.Errorf("tree record: %v", err)
	}
}

// TestHolderDeps: the holder carries neither gRPC, nor the daemon, nor the
// MCP SDK.
func TestHolderDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/corral-dev/corral/internal/holder", "github.com/corral-dev/corral/terminal").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	for _, bad := range []string{"google.golang.org/grpc", "google.golang.org/protobuf", "internal/daemon", "internal/mcpserver", "modelcontextprotocol", "spf13/cobra"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("the holder imports %s", bad)
		}
	}
	if !strings.Contains(string(out), "internal/vt") {
		t.Error("go list shows no internal/vt: the check looked at nothing")
	}
}

var _ = vt.New

func TestStartFailure(t *testing.T) {
	mark := testproc.Guard(t, time.Minute)
	dir := filepath.Join(testproc.TempDir(t), "sess")
	_, err := Open(ctx10(t), dir, Config{Path: "/nonexistent/program", Env: progEnv(mark),
		Holder: []string{os.Args[0]}, HolderEnv: append(testproc.Env(mark), holderEnv+"=1")})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/program") || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("a program that does not exist: %v", err)
	}
	if _, err := Open(ctx10(t), dir, Config{Path: "/bin/sh", Cols: 5000, Rows: 24}); err == nil || !strings.Contains(err.Error(), "between 1 and") {
		t.Errorf("a 5000-column session: %v", err)
	}
	if _, err := Dial(ctx10(t), dir); !errors.Is(err, ErrGone) {
		t.Errorf("dial where no holder serves: %v", err)
	}
}

// TestFloodMemory: a flood of output keeps the holder's memory within its
// scrollback budget and a fixed overhead, and the scrollback within its
// budget.
func TestFloodMemory(t *testing.T) {
	mark := testproc.Guard(t, 3*time.Minute)
	const budget = 1 << 20
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"sh", "-c", "yes 'a line of text that floods the scrollback of the terminal' | head -n 1000000; echo flood-over; exec sleep 600"},
		ScrollbackBytes: budget})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r, err := tm.Wait(ctx, WaitOptions{Text: "(?m)^flood-over$", Timeout: 110 * time.Second}); err != nil || r.Reason != "text" {
		t.Fatalf("flood: %+v, %v", r, err)
	}
	s, err := tm.Screen(ctx10(t), ScreenOptions{Scrollback: -1})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, l := range s.Scrollback {
		kept += len(l)
	}
	if kept > budget || len(s.Scrollback) < 1000 {
		t.Errorf("scrollback after 60 MB: %d rows, %d bytes (budget %d)", len(s.Scrollback), kept, budget)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", tm.HolderPid()))
	var rss int
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "VmHWM:" {
			fmt.Sscan(f[1], &rss)
		}
	}
	// The binary's text, the runtime, a 1 MiB budget and the
	// collector's slack: far under what 60 MB of output would take.
	// Under the race detector (its shadow memory) only that it was read.
	if limit := 40 << 10; rss == 0 || (rss > limit && !raceEnabled) {
		t.Errorf("holder's peak RSS %d KiB after 60 MB of output with a 1 MiB scrollback", rss)
	}
	t.Logf("%d rows, %d bytes of scrollback kept; holder peak RSS %d KiB", len(s.Scrollback), kept, rss)
}

// clientMain is an attached client in a process of its own: it says
// "attached", reads until it sees flood-done, then says how many times it
// was resynced and how much it read.
func clientMain(dir string) int {
	tm, err := Dial(context.Background(), dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	a, err := tm.Attach(context.Background(), AttachOptions{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("attached")
	buf := make([]byte, 32<<10)
	var tail []byte
	total := 0
	for {
		n, err := a.Read(buf)
		total += n
		tail = append(tail, buf[:n]...)
		if strings.Contains(string(tail), "flood-done\r\n") {
			fmt.Printf("resyncs=%d bytes=%d\n", a.Resyncs(), total)
			a.Close()
			return 0
		}
		if len(tail) > 64 {
			tail = tail[len(tail)-64:]
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
	}
}

// TestStoppedClientProcess: an attached client process stopped with
// SIGSTOP under a flood stalls neither the program nor a live client;
// continued, it is resynced and shows the end of the flood.
func TestStoppedClientProcess(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"sh"}})
	waitText(t, tm, `(?m)^\$`)
	cl := exec.Command(os.Args[0])
	cl.Env = append(testproc.Env(mark), clientEnv+"="+tm.Dir())
	out, err := cl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cl.Process.Kill(); cl.Wait() }()
	br := bufio.NewReader(out)
	if l, _ := br.ReadString('\n'); l != "attached\n" {
		t.Fatalf("client: %q", l)
	}
	cl.Process.Signal(syscall.SIGSTOP)
	live, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := readAttachment(live, 80, 24)
	tm.Send(ctx10(t), []byte("i=0; while [ $i -lt 30 ]; do head -c 1000000 /dev/zero | tr '\\0' y; i=$((i+1)); done; echo; echo flood-\"\"done\r"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if res, err := tm.Wait(ctx, WaitOptions{Text: "(?m)^flood-done$", Timeout: 50 * time.Second}); err != nil || res.Reason != "text" {
		t.Fatalf("the program stalled behind a stopped client: %+v, %v", res, err)
	}
	r.waitFor(t, "flood-done")
	cl.Process.Signal(syscall.SIGCONT)
	done := make(chan string, 1)
	go func() { l, _ := br.ReadString('\n'); done <- l }()
	select {
	case l := <-done:
		var resyncs, n int
		fmt.Sscanf(l, "resyncs=%d bytes=%d", &resyncs, &n)
		if resyncs == 0 || n > 8<<20 {
			t.Errorf("the continued client: %q (want a resync, and not the whole 30 MB)", l)
		}
		t.Logf("continued client: %s", strings.TrimSpace(l))
	case <-time.After(30 * time.Second):
		t.Fatal("the continued client never showed the end of the flood")
	}
	live.Close()
	r.end(t)
}
