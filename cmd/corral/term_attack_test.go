//go:build linux

package main

// Attacks on terminal sessions through the daemon: files swapped in a
// session's directory and records edited to name processes that are not
// ours, seen by the next daemon; hostile term calls.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/testproc"
)

// termPids returns a terminal session's holder and program pids.
func (e *daemonEnv) termPids(name string) (int, int) {
	e.t.Helper()
	var info []map[string]any
	json.Unmarshal([]byte(e.must("ls", "--json")), &info)
	for _, s := range info {
		if s["name"] == name {
			h, _ := s["holder_pid"].(float64)
			p, _ := s["shell_pid"].(float64)
			return int(h), int(p)
		}
	}
	e.t.Fatalf("no session %s", name)
	return 0, 0
}

// foreign starts a process that is not corral's (a plain child of the
// test, in a group of its own, with the test's marker for the survivor
// check) and kills it, by pid, at cleanup.
func foreign(t *testing.T, mark string) (int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Env = testproc.Env(mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	st, err := proc.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st.StartTime
}

// TestAttackRecordNamesAForeignProcess: with the daemon down, a terminal
// session's record is edited so that its holder and its program are
// processes that are not ours but keeps the recorded start times (the
// pids reused since). The next daemon, and corral kill, must signal
// neither stranger. (A record forged with the strangers' own start times
// is not refused: see the report of t12-sec; only the user can write the
// record.)
func TestAttackRecordNamesAForeignProcess(t *testing.T) {
	for _, forged := range []bool{false} {
		name := map[bool]string{false: "reused", true: "forged"}[forged]
		t.Run(name, func(t *testing.T) {
			e := newDaemonEnv(t)
			e.must("term", "open", "s", "--", "sleep", "600")
			holder, program := e.termPids("s")
			e.killDaemon()
			// Our own session's processes: killed by pid at the end
			// (the edited record no longer names them).
			t.Cleanup(func() {
				syscall.Kill(holder, syscall.SIGKILL)
				syscall.Kill(program, syscall.SIGKILL)
			})
			fh, fhStart := foreign(t, e.mark)
			fp, fpStart := foreign(t, e.mark)
			st, err := store.Open(filepath.Join(e.state, "corral.db"))
			if err != nil {
				t.Fatal(err)
			}
			err = st.Update("s", func(r *store.Session) error {
				id := &r.Tree.Identity
				id.Pid, id.Pgid = fh, fh
				pr := r.Term.Program
				pr.Pid, pr.Pgid = fp, fp
				if forged {
					id.StartTime, pr.StartTime = fhStart, fpStart
				}
				return nil
			})
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			s := e.ls()["s"] // the next daemon
			time.Sleep(500 * time.Millisecond)
			for _, pid := range []int{fh, fp} {
				if !testproc.Alive(pid) {
					log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
					t.Fatalf("the daemon killed %d, a process a forged record named (session %+v)\n%s", pid, s, log)
				}
			}
			if s.State == "up" {
				t.Errorf("a session whose record names a stranger is up: %+v", s)
			}
			if _, errs, rc := e.run("kill", "s"); rc != 0 {
				t.Logf("kill s: %d %s", rc, errs)
			}
			for _, pid := range []int{fh, fp} {
				if !testproc.Alive(pid) {
					log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
					t.Errorf("corral kill signalled %d, a stranger the record named\n%s", pid, log)
				}
			}
		})
	}
}

// TestAttackSwappedSocketAtTakeOver: with the daemon down, a session's
// socket is replaced by a link to another session's socket. The next
// daemon must neither take the other holder for this session's nor kill
// this session's own holder, which it can still prove is ours: the
// session is broken, and its holder keeps running.
func TestAttackSwappedSocketAtTakeOver(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "a", "--", "sleep", "600")
	e.must("term", "open", "b", "--", "sleep", "600")
	ha, _ := e.termPids("a")
	e.killDaemon()
	sock := filepath.Join(e.state, "sessions", "a", "sock")
	aside := filepath.Join(e.state, "sessions", "a", "real-sock")
	if err := os.Rename(sock, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.state, "sessions", "b", "sock"), sock); err != nil {
		t.Fatal(err)
	}
	l := e.ls()
	if !testproc.Alive(ha) {
		log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
		t.Fatalf("the next daemon killed a's holder %d, proven ours, because a link in its directory led to b's: %+v\n%s", ha, l["a"], log)
	}
	if l["a"].State != "broken" || l["b"].State != "up" {
		t.Errorf("after the swap: a %+v, b %+v", l["a"], l["b"])
	}
	if _, errs, rc := e.run("term", "screen", "a"); rc == 0 || !strings.Contains(errs, "broken") {
		t.Errorf("screen of a: %d %q", rc, errs)
	}
	os.Remove(sock)
	if err := os.Rename(aside, sock); err != nil {
		t.Fatal(err)
	}
	e.must("kill", "a")
	if !waitGone(ha, 10*time.Second) {
		t.Error("kill left a's holder")
	}
}

// TestAttackHostileTermCalls: names that are paths, NUL, absurd sizes,
// a million keys, a huge pattern: each is refused with a clear error and
// changes nothing.
func TestAttackHostileTermCalls(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "ok", "--", "sleep", "600")
	for _, name := range []string{"../x", "a/b", "..", ".", "", strings.Repeat("n", 10000)} {
		if _, errs, rc := e.run("term", "open", name, "--", "true"); rc == 0 || errs == "" {
			t.Errorf("term open %q: %d %q", name, rc, errs)
		}
		if _, errs, rc := e.run("term", "screen", name); rc == 0 || errs == "" {
			t.Errorf("term screen %q: %d %q", name, rc, errs)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(e.state, "sessions")); len(entries) != 1 {
		t.Errorf("session directories: %v", entries)
	}
	for _, size := range []string{"65535x65535", "0x0", "-1x-1", "4097x10", "80x"} {
		if _, errs, rc := e.run("term", "resize", "ok", size); rc == 0 || errs == "" {
			t.Errorf("term resize %s: %d %q", size, rc, errs)
		}
		if _, errs, rc := e.run("term", "open", "new", "--size", size, "--", "true"); rc == 0 || errs == "" {
			t.Errorf("term open --size %s: %d %q", size, rc, errs)
		}
	}
	if out := e.screenSize("ok"); out != "80x24" {
		t.Errorf("size after the refused resizes: %s", out)
	}
	keys := make([]string, 1000000)
	for i := range keys {
		keys[i] = "Enter"
	}
	c := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A million keys is 6 MB of call, over the wire's bound: refused,
	// and the connection's next call still works.
	if err := c.TermSendKeys(ctx, "ok", nil, keys); err == nil {
		t.Error("a send of a million keys was accepted")
	} else {
		t.Logf("a million keys: %v", err)
	}
	keys[5] = "NoSuchKey"
	if err := c.TermSendKeys(ctx, "ok", nil, keys[:100000]); err == nil || !strings.Contains(err.Error(), "NoSuchKey") {
		t.Errorf("100,000 keys, one unknown: %v", err)
	}
	if err := c.TermSend(ctx, "ok", make([]byte, 3<<20)); err != nil {
		t.Errorf("a send of 3 MiB: %v", err)
	}
	// A NUL in a name, a 1 MB pattern: through the client (an argument
	// cannot carry either).
	for _, name := range []string{"a\x00b", "a\x00/../../x", "../../x"} {
		if _, err := c.TermOpen(ctx, name, client.TermOpenOptions{Command: []string{"true"}}); err == nil {
			t.Errorf("term open %q succeeded", name)
		}
		if _, err := c.TermScreen(ctx, name, client.TermScreenOptions{}); err == nil {
			t.Errorf("term screen %q succeeded", name)
		}
	}
	start := time.Now()
	if r, err := c.TermWait(ctx, "ok", client.TermWaitOptions{Text: strings.Repeat("(a|b)", 200000), Timeout: time.Second}); err == nil && r.Reason != "timeout" {
		t.Errorf("a wait for a 1 MB pattern: %+v", r)
	} else {
		t.Logf("a wait for a 1 MB pattern: %v in %v", err, time.Since(start))
	}
	if _, errs, rc := e.run("term", "wait", "ok", "--text", "a{1001}", "--timeout", "1s"); rc == 0 || !strings.Contains(errs, "regexp") {
		t.Errorf("a wait for a pattern too large: %d %q", rc, errs)
	}
	if s := e.ls()["ok"]; s.State != "up" {
		t.Errorf("after the hostile calls: %+v", s)
	}
}

// TestAttackHostileModesAfterDetach: a program sets every mode it can on
// the attached user's terminal (a tmux pane as that terminal): the
// alternate screen, mouse tracking, cursor and keypad modes, insert
// mode, no wrap, a hidden cursor, origin mode, a scroll region, the DEC
// graphics character set in G0 and G1 with G1 shifted in. After a detach
// the user's terminal must be back to its defaults, and text it prints
// must read as text.
func TestAttackHostileModesAfterDetach(t *testing.T) {
	e := newDaemonEnv(t)
	needTmux(t)
	dir := testproc.TempDir(t)
	modes := `\033[?1049h\033[?1000h\033[?1002h\033[?1003h\033[?1005h\033[?1006h\033[?1h\033=\033[4h\033[?7l\033[?25l\033[5;10r\033[?6h\033(0\033)0\016`
	// Half the modes before the attach (the redraw replays them), half
	// while attached (the live output carries them).
	flag := filepath.Join(dir, "go")
	half := strings.Index(modes, `\033[4h`)
	prog := `printf '` + modes[:half] + `'; while [ ! -e ` + flag + ` ]; do sleep 0.05; done; printf '` + modes[half:] + `'; exec sleep 600`
	e.must("term", "open", "hostile", "--", "sh", "-c", prog)
	e.must("term", "wait", "hostile", "--idle", "500ms", "--timeout", "10s")
	attach := fmt.Sprintf("CORRAL_STATE_DIR=%s %s attach hostile; echo \"rc=$? qrstuvwxyz\"; exec sleep 600", e.state, corralBin)
	tmux := tmuxServer(t, e.mark, 80, 24, "sh", "-c", attach)
	flags := "#{alternate_on} #{mouse_any_flag} #{mouse_button_flag} #{mouse_standard_flag} #{mouse_sgr_flag} #{mouse_utf8_flag} " +
		"#{keypad_cursor_flag} #{keypad_flag} #{insert_flag} #{wrap_flag} #{cursor_flag} #{origin_flag} #{scroll_region_upper} #{scroll_region_lower}"
	defaults := "0 0 0 0 0 0 0 0 0 1 1 0 0 23"
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = strings.TrimSpace(tmux("display", "-p", "-t", "s", flags)); strings.HasPrefix(got, "1 1") && strings.HasSuffix(got, "1 4 9") {
			break
		}
	}
	t.Logf("attached: %s", got)
	if !strings.HasPrefix(got, "1 1") {
		t.Fatalf("the program's modes never reached the outer terminal: %s", got)
	}
	tmux("send-keys", "-t", "s", `C-\`)
	var screen string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if screen = tmux("capture-pane", "-p", "-t", "s"); strings.Contains(screen, "rc=") {
			break
		}
	}
	got = strings.TrimSpace(tmux("display", "-p", "-t", "s", flags))
	if got != defaults {
		t.Errorf("after the detach the outer terminal's modes are\n  %s, not\n  %s\n(%s)", got, defaults, flags)
	}
	if !strings.Contains(screen, "rc=0 qrstuvwxyz") {
		t.Errorf("after the detach text does not read as text (a character set leaked?):\n%s", screen)
	}
}

// termProbe is a client of the daemon's wire protocol in Python, run as
// another user: for each call given as JSON it prints the type of the
// daemon's answer (R, E, or - when the connection closed).
const termProbe = `
import json, socket, struct, sys
def frame(s, t, v):
    b = json.dumps(v).encode()
    s.sendall(t + struct.pack(">I", len(b)) + b)
def read(s):
    h = b""
    while len(h) < 5:
        c = s.recv(5 - len(h))
        if not c:
            return "-"
        h += c
    n = struct.unpack(">I", h[1:])[0]
    while n > 0:
        c = s.recv(min(n, 65536))
        if not c:
            break
        n -= len(c)
    return h[:1].decode()
def probe(call):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(sys.argv[1])
    got = ""
    try:
        frame(s, b"H", {"protocol": "corral", "versions": [1, 2]})
        got += read(s)
        frame(s, b"C", json.loads(call))
        got += read(s)
        if got.endswith("R") and json.loads(call)["call"] == "term_attack":
            s.sendall(b"i" + struct.pack(">I", 19) + b"typed-by-stranger\r\n")
    except OSError:
        got += "-"
    s.close()
    return got
for call in sys.argv[2:]:
    print(probe(call))
`

// TestAttackOtherUserTermCalls: another local user who can reach the
// daemon's socket (the directories and the socket opened up for it, so
// that only the daemon's peer check stands) can neither read, type into,
// resize, wait on, attach to nor open a terminal session.
func TestAttackOtherUserTermCalls(t *testing.T) {
	u := testproc.NewUser(t)
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 for the probe")
	}
	e := newDaemonEnv(t)
	e.must("term", "open", "mine", "--", "sh", "-c", "echo ready; exec cat")
	e.must("term", "wait", "mine", "--text", "ready", "--timeout", "10s")
	sock := filepath.Join(e.state, "corral.sock")
	for _, d := range []string{filepath.Dir(e.state), e.state} {
		os.Chmod(d, 0o711)
	}
	os.Chmod(sock, 0o666)
	defer os.Chmod(e.state, 0o700)
	calls := []string{
		`{"call":"status"}`,
		`{"call":"term_screen","term":{"name":"mine"}}`,
		`{"call":"term_send","term":{"name":"mine","data":"dHlwZWQtYnktc3RyYW5nZXIK"}}`,
		`{"call":"term_resize","term":{"name":"mine","cols":20,"rows":5}}`,
		`{"call":"term_wait","term":{"name":"mine","text":"ready","timeout_ms":1000}}`,
		`{"call":"term_open","term":{"name":"theirs","command":["true"]}}`,
		`{"call":"term_attach","term":{"name":"mine","cols":20,"rows":5}}`,
	}
	// Ourselves first, as the control: the probe works.
	run := func(cred bool) []string {
		c := exec.Command("/usr/bin/python3", append([]string{"-c", termProbe, sock}, calls[:1]...)...)
		if cred {
			c = exec.Command("/usr/bin/python3", append([]string{"-c", termProbe, sock}, calls...)...)
			c.SysProcAttr = u.Credential()
		}
		c.Env = testproc.Env(e.mark)
		c.Dir = "/"
		out, errs, rc := runCaptured(c)
		if rc != 0 {
			t.Fatalf("probe (as another user %v): %d %s", cred, rc, errs)
		}
		return strings.Fields(out)
	}
	if got := run(false); len(got) != 1 || got[0] != "WR" {
		t.Fatalf("the probe as ourselves: %v", got)
	}
	got := run(true)
	for i, call := range calls {
		if i >= len(got) || strings.Contains(got[i], "R") {
			t.Errorf("as another user, %s: %v", call, got)
		}
	}
	t.Logf("as another user: %v", got)
	os.Chmod(e.state, 0o700)
	if out := e.must("term", "screen", "mine"); strings.Contains(out, "stranger") {
		t.Errorf("another user's input reached the program:\n%s", out)
	}
	if got := e.screenSize("mine"); got != "80x24" {
		t.Errorf("another user resized the session to %s", got)
	}
	if _, ok := e.ls()["theirs"]; ok {
		t.Error("another user opened a session")
	}
}

// TestAttackWholeScrollbackThroughTheDaemon: term screen --scrollback -1
// on a full scrollback either prints it or says why not, clearly.
func TestAttackWholeScrollbackThroughTheDaemon(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "big", "--", "sh", "-c", "seq 1 400000; echo end-of-seq; exec sleep 600")
	e.must("term", "wait", "big", "--text", "^end-of-seq$", "--timeout", "120s") // (a wait, not a speed bound: an emulated VM takes over 20 s)
	out, errs, rc := e.run("term", "screen", "big", "--scrollback", "-1")
	t.Logf("term screen --scrollback -1: %d, %d bytes, %q", rc, len(out), errs)
	if rc != 0 {
		t.Errorf("term screen --scrollback -1: %d %s", rc, errs)
	}
	if !strings.Contains(out, "\n399978\n") {
		t.Errorf("the scrollback's newest rows are missing")
	}
	// Long rows of many colours: the scrollback's budget in bytes of
	// content is many more in JSON with their SGR sequences.
	e.must("term", "open", "colour", "--", "sh", "-c", `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); printf '\033[3%dm%s\033[0m\033[4%dmx\033[0m' $((i%8)) abcdefghijklmnopqrstuvwxyz $((i%7)); done; echo; echo end-of-colour; exec sleep 600`)
	e.must("term", "wait", "colour", "--text", "^end-of-colour$", "--timeout", "60s")
	out, errs, rc = e.run("term", "screen", "colour", "--scrollback", "-1", "--ansi")
	t.Logf("term screen --scrollback -1 --ansi: %d, %d bytes, %q", rc, len(out), errs)
	if rc != 0 && !strings.Contains(errs, "scrollback") {
		t.Errorf("term screen --scrollback -1 --ansi failed without saying why: %d %s", rc, errs)
	}
}

// TestAttackResizeFloodThroughTheDaemon: an attached client that sends
// thousands of resizes, each to a new size, slows no one else's call
// much, and the session ends at the size it asked for last.
func TestAttackResizeFloodThroughTheDaemon(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "flood", "--", "sh", "-c", "echo ready; exec sleep 600")
	e.must("term", "open", "other", "--", "sh", "-c", "echo other; exec sleep 600")
	c := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := attach80x24(t, ctx, c, "flood")
	defer a.Close()
	go io.Copy(io.Discard, a)
	stop := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		i := 0
		for ; ; i++ {
			select {
			case <-stop:
				sent <- i
				return
			default:
			}
			if a.Resize(40+i%100, 10+i%50) != nil {
				sent <- i
				return
			}
		}
	}()
	var worst time.Duration
	for i := 0; i < 10; i++ {
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		e.must("term", "screen", "other")
		worst = max(worst, time.Since(start))
	}
	close(stop)
	n := <-sent
	a.Resize(100, 30)
	t.Logf("%d resizes sent; the slowest screen of another session meanwhile took %v", n, worst)
	if worst > 3*time.Second {
		t.Errorf("a resize flood held another session's screen up for %v", worst)
	}
	for deadline := time.Now().Add(20 * time.Second); e.screenSize("flood") != "100x30"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after the flood the size is %s, not the last asked for", e.screenSize("flood"))
		}
	}
}

// TestAttackSwappedDirectoryAtTakeOver: with the daemon down, a session's
// directory is replaced by a link to another session's. The next daemon
// takes neither the link nor the other holder for this session, kills
// nothing, and the session is broken until it is killed.
func TestAttackSwappedDirectoryAtTakeOver(t *testing.T) {
	e := newDaemonEnv(t)
	e.must("term", "open", "a", "--", "sleep", "600")
	e.must("term", "open", "b", "--", "sleep", "600")
	ha, pa := e.termPids("a")
	hb, _ := e.termPids("b")
	e.killDaemon()
	dir := filepath.Join(e.state, "sessions", "a")
	aside := filepath.Join(e.state, "sessions", "a-real")
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.state, "sessions", "b"), dir); err != nil {
		t.Fatal(err)
	}
	l := e.ls()
	if !testproc.Alive(ha) || !testproc.Alive(pa) || !testproc.Alive(hb) {
		log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
		t.Fatalf("after a's directory was swapped for a link, the next daemon killed a proven holder or program (a %v/%v, b %v): %+v\n%s",
			testproc.Alive(ha), testproc.Alive(pa), testproc.Alive(hb), l, log)
	}
	if l["a"].State != "broken" || l["b"].State != "up" {
		t.Errorf("after the swap: a %+v, b %+v", l["a"], l["b"])
	}
	if fi, err := os.Lstat(dir); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was changed: %v %v", fi, err)
	}
	os.Remove(dir)
	if err := os.Rename(aside, dir); err != nil {
		t.Fatal(err)
	}
	e.must("kill", "a")
	if !waitGone(ha, 10*time.Second) || !waitGone(pa, 10*time.Second) {
		t.Error("kill left a's tree")
	}
}
