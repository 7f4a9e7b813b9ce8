//go:build linux

package terminal

// Attacks on a terminal session from outside its holder: another user, a
// hostile client of the same user, files swapped in the session's
// directory, and a program that writes hostile escape sequences. Each
// runs real holders on real sockets.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/holder"
	"github.com/corral-dev/corral/internal/testproc"
	"golang.org/x/sys/unix"
)

// rawCall sends req as the first frame on a fresh connection to tm's
// holder and returns its answer.
func rawCall(t *testing.T, tm *Term, req holder.Request) holder.Answer {
	t.Helper()
	conn, err := net.DialTimeout("unix", filepath.Join(tm.Dir(), holder.SocketName), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := holder.WriteJSON(conn, holder.FrameRequest, req); err != nil {
		t.Fatal(err)
	}
	typ, p, err := holder.ReadFrame(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s: no answer: %v", req.Op, err)
	}
	var a holder.Answer
	if typ != holder.FrameAnswer || json.Unmarshal(p, &a) != nil {
		t.Fatalf("%s: answered %q %q", req.Op, typ, p)
	}
	return a
}

// alive checks that tm's holder still answers, promptly, with its size.
func alive(t *testing.T, tm *Term, cols, rows int) {
	t.Helper()
	start := time.Now()
	s, err := tm.Screen(ctx10(t), ScreenOptions{})
	if err != nil {
		t.Fatalf("the holder no longer answers: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a screen took %v", d)
	}
	if s.Cols != cols || s.Rows != rows {
		t.Errorf("size %dx%d, want %dx%d", s.Cols, s.Rows, cols, rows)
	}
}

// TestAttackOtherUserCannotReachHolder: another local user can neither
// list the session's directory nor reach its socket (the shell's open
// would say ENXIO, "No such device or address", on a socket it could
// reach; it must say EACCES).
func TestAttackOtherUserCannotReachHolder(t *testing.T) {
	u := testproc.NewUser(t)
	mark := testproc.Guard(t, time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh"}})
	sock := filepath.Join(tm.Dir(), holder.SocketName)
	for _, sh := range []string{"ls " + tm.Dir(), "exec 3<" + sock, "exec 3>" + sock} {
		cmd := exec.Command("/bin/sh", "-c", sh)
		cmd.Env = testproc.Env(mark)
		cmd.SysProcAttr = u.Credential()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "ermission denied") {
			t.Errorf("as another user, %q: %v %s", sh, err, out)
		}
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket is %v", fi.Mode())
	}
	alive(t, tm, 80, 24)
}

// TestAttackHostileRequests: malformed, oversized and absurd requests of
// a same-user client each get an error or a closed connection, change
// nothing, and leave the holder serving.
func TestAttackHostileRequests(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh"}})
	sock := filepath.Join(tm.Dir(), holder.SocketName)

	// A header that announces 4 GiB: the holder hangs up, reads nothing.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [5]byte
	hdr[0] = holder.FrameRequest
	binary.BigEndian.PutUint32(hdr[1:], 0xffffffff)
	conn.Write(hdr[:])
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("a 4 GiB frame: read %d, %v", n, err)
	}
	conn.Close()
	// Garbage and a first frame that is not a request.
	for _, b := range [][]byte{[]byte("GET / HTTP/1.0\r\n\r\n"), {holder.FrameInput, 0, 0, 0, 1, 'x'}, {holder.FrameRequest, 0, 0, 0, 3, '{', '{', '{'}} {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(b)
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		buf := make([]byte, 4096)
		n, _ := conn.Read(buf)
		conn.Close()
		if n > 0 && !bytes.Contains(buf[:n], []byte("error")) {
			t.Errorf("%q: answered %q", b, buf[:n])
		}
	}
	for _, sz := range []holder.Size{{Cols: 65535, Rows: 65535}, {Cols: 0, Rows: 0}, {Cols: -1, Rows: -1}, {Cols: 1 << 40, Rows: 2}, {Cols: 5000, Rows: 1}} {
		if a := rawCall(t, tm, holder.Request{Op: "resize", Size: sz}); a.Error == "" {
			t.Errorf("resize to %+v: no error", sz)
		}
	}
	if a := rawCall(t, tm, holder.Request{Op: "attach", Size: holder.Size{Cols: 65535, Rows: 65535}}); a.Error == "" {
		t.Error("attach at 65535x65535: no error")
	}
	for _, sb := range []int{-1 << 40, 1 << 40, -1} {
		if a := rawCall(t, tm, holder.Request{Op: "screen", Scrollback: sb}); a.Screen == nil {
			t.Errorf("screen with scrollback %d: %+v", sb, a)
		}
	}
	for _, op := range []string{"", "../close", "close\x00", strings.Repeat("x", 100000)} {
		if a := rawCall(t, tm, holder.Request{Op: op}); a.Error == "" {
			t.Errorf("op %.20q: no error", op)
		}
	}
	// Patterns: one too large to compile, one RE2 runs in linear time
	// that a backtracking engine would not, one huge but valid. Each
	// returns within its timeout, and the holder answers meanwhile.
	pats := []string{"a{1001}", strings.Repeat("(", 5000) + strings.Repeat(")", 5000), "(x+x+)+y", strings.Repeat("(a|b)", 100000)}
	for _, p := range pats {
		start := time.Now()
		a := rawCall(t, tm, holder.Request{Op: "wait", Wait: holder.WaitSpec{Text: p, Timeout: 500 * time.Millisecond}})
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("wait for %.20q took %v", p, d)
		}
		if a.Error == "" && a.Reason != "timeout" {
			t.Errorf("wait for %.20q: %+v", p, a)
		}
		alive(t, tm, 80, 24)
	}
	// Negative and absurd durations.
	if a := rawCall(t, tm, holder.Request{Op: "wait", Wait: holder.WaitSpec{Idle: -1, Timeout: -1}}); a.Error == "" {
		t.Errorf("a wait for nothing: %+v", a)
	}

	// A resize flood on an attachment that never reads, beside a
	// program flooding its terminal. Under the race detector the
	// emulator is many times slower (30 MB took over 10 s in CI): a
	// tenth of the flood there.
	flood := "30000000"
	if raceEnabled {
		flood = "3000000"
	}
	if err := tm.Send(ctx10(t), []byte("yes flood | head -c "+flood+"; echo done-flood\r")); err != nil {
		t.Fatal(err)
	}
	conn, err = net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	holder.WriteJSON(conn, holder.FrameRequest, holder.Request{Op: "attach"})
	conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for i := 0; i < 5000; i++ {
		sz := holder.Size{Cols: 20 + i%200, Rows: 5 + i%100}
		if i%3 == 0 {
			sz = holder.Size{Cols: 65535, Rows: -3}
		}
		if err := holder.WriteJSON(conn, holder.FrameResize, sz); err != nil {
			t.Fatalf("resize frame %d: %v", i, err)
		}
	}
	holder.WriteJSON(conn, holder.FrameResize, holder.Size{Cols: 80, Rows: 24})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if r, err := tm.Wait(ctx, WaitOptions{Text: "^done-flood$", Timeout: 80 * time.Second}); err != nil || r.Reason != "text" {
		t.Fatalf("the flood never ended on the screen: %+v %v", r, err)
	}
	// The flood may end before the holder has taken the last of the
	// resize frames queued on that attachment (under the race detector a
	// 3 MB flood did): wait, bounded, for the last one to be in force.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s, err := tm.Screen(ctx10(t), ScreenOptions{}); err == nil && s.Cols == 80 && s.Rows == 24 {
			break
		}
	}
	alive(t, tm, 80, 24)
}

// TestAttackBigSend: a send larger than one frame's payload (a paste of
// a big file) arrives whole and in order.
func TestAttackBigSend(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	out := filepath.Join(testproc.TempDir(t), "got")
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "stty raw -echo; head -c 3000000 > " + out + "; echo got-all; exec sleep 600"}})
	time.Sleep(300 * time.Millisecond) // stty first
	data := bytes.Repeat([]byte("0123456789abcdef"), 3000000/16)
	if err := tm.Send(ctx10(t), data); err != nil {
		t.Fatalf("a send of %d bytes: %v", len(data), err)
	}
	waitText(t, tm, "got-all")
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("the program read %d bytes, not the %d sent, or not in order", len(got), len(data))
	}
}

// TestAttackSwappedSocket: a session's socket replaced by a link to
// another session's socket, or its directory by a link to another
// session's directory, is refused: Dial must not hand back a Term on
// another session.
func TestAttackSwappedSocket(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	a := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh"}})
	b := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh"}})
	// Dir b's socket is moved aside (b keeps serving on it); a's
	// socket path becomes a link to it.
	sockA := filepath.Join(a.Dir(), holder.SocketName)
	aside := filepath.Join(a.Dir(), "real-sock")
	if err := os.Rename(sockA, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(b.Dir(), holder.SocketName), sockA); err != nil {
		t.Fatal(err)
	}
	if d, err := Dial(ctx10(t), a.Dir()); err == nil {
		t.Errorf("Dial through a socket swapped for a link: holder %d (a's is %d, b's %d)", d.HolderPid(), a.HolderPid(), b.HolderPid())
	}
	if _, err := a.Screen(ctx10(t), ScreenOptions{}); err == nil {
		t.Error("a's Term followed a link to b's socket")
	}
	os.Remove(sockA)
	if err := os.Rename(aside, sockA); err != nil {
		t.Fatal(err)
	}
	alive(t, a, 80, 24)

	// A directory swapped for a link.
	link := filepath.Join(testproc.TempDir(t), "link")
	if err := os.Symlink(b.Dir(), link); err != nil {
		t.Fatal(err)
	}
	if d, err := Dial(ctx10(t), link); err == nil {
		t.Errorf("Dial through a linked directory: holder %d", d.HolderPid())
	}
}

// TestAttackHostileEscapes: a program writes OSC 52 clipboard writes, a
// title full of control characters (C0 can't be in an OSC; C1 as UTF-8
// and DEL can), DCS and APC strings of many MB, and CSI parameters meant
// to make the screen model allocate: the holder stays small, and nothing
// it hands a caller that prints it (the screen's text, its ANSI form,
// the title, a redraw) carries a sequence the program chose.
func TestAttackHostileEscapes(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	script := `printf '\033]52;c;ZXZpbA==\007'
head -c 20000000 /dev/zero | tr '\0' A | { printf '\033P'; cat; printf '\033\\'; }
head -c 20000000 /dev/zero | tr '\0' B | { printf '\033_'; cat; printf '\033\\'; }
head -c 20000000 /dev/zero | tr '\0' C | { printf '\033]0;'; cat; printf '\007'; }
printf '\033[65535;65535r\033[65535@\033[65535L\033[65535b\033[8;65535;65535t\033[65535I\033[?1049h\033[65535;65535H\033[?1049l'
printf 'x\033[999999999999999999999999b\033[3;1H'
printf '\033]2;ti\302\233' ; printf '31m\177tle\302\2332J\033\\'
printf 'visible\302\233\302\2201m\n'
echo end-of-attack; exec sleep 600`
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", script}})
	r, err := tm.Wait(ctx10(t), WaitOptions{Text: "end-of-attack", Timeout: 9 * time.Second})
	if err != nil || r.Reason != "text" {
		s, _ := tm.Screen(ctx10(t), ScreenOptions{})
		t.Fatalf("%+v %v\n%+v", r, err, s)
	}
	if rss := vmRSS(t, tm.HolderPid()); rss > 200<<20 && !raceEnabled {
		t.Errorf("the holder's RSS is %d MiB after the attack", rss>>20)
	}
	controls := regexp.MustCompile("[\x00-\x09\x0b-\x1f\x7f\u0080-\u009f]")
	s, err := tm.Screen(ctx10(t), ScreenOptions{Scrollback: -1})
	if err != nil {
		t.Fatal(err)
	}
	if m := controls.FindString(s.Text); m != "" {
		t.Errorf("the screen's text carries %q: %q", m, s.Text)
	}
	if m := controls.FindString(s.Title); m != "" {
		t.Errorf("the title carries %q: %q", m, s.Title)
	}
	for _, row := range s.Scrollback {
		if m := controls.FindString(row); m != "" {
			t.Errorf("a scrollback row carries %q: %q", m, row)
		}
	}
	sgr := regexp.MustCompile(`\x1b\[[0-9;:]*m`)
	sa, err := tm.Screen(ctx10(t), ScreenOptions{ANSI: true, Scrollback: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, txt := range append([]string{sa.Text}, sa.Scrollback...) {
		if m := controls.FindString(sgr.ReplaceAllString(txt, "")); m != "" {
			t.Errorf("the ANSI text carries %q beyond SGR: %q", m, txt)
		}
	}
	// A reattach's redraw replays no clipboard write and no string.
	a, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rd := readAttachment(a, 80, 24)
	rd.waitFor(t, "end-of-attack")
	a.Detach()
	rd.end(t)
	rd.mu.Lock()
	raw := string(rd.raw)
	rd.mu.Unlock()
	for _, bad := range []string{"\x1b]52", "\x1bP", "\x1b_", "\u009b", "\x7f", "AAAA", "BBBB"} {
		if strings.Contains(raw, bad) {
			t.Errorf("the redraw carries %q", bad)
		}
	}
	if len(raw) > 1<<20 {
		t.Errorf("the redraw is %d bytes", len(raw))
	}
}

func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestAttackLongIdleWaitStaysSmall: a wait for quiet output on a program
// that never goes quiet keeps nothing per screen change (each change
// used to leave a timer and a deferred stop until the wait ended).
func TestAttackLongIdleWaitStaysSmall(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "while :; do echo x; done"}, ScrollbackBytes: -1})
	hold := func(o WaitOptions) int {
		done := make(chan struct{})
		go func() {
			defer close(done)
			tm.Wait(ctx10(t), o)
		}()
		time.Sleep(7 * time.Second)
		rss := vmRSS(t, tm.HolderPid())
		<-done
		return rss
	}
	base := hold(WaitOptions{Text: "never-shown", Timeout: 8 * time.Second})
	idle := hold(WaitOptions{Idle: time.Hour, Timeout: 8 * time.Second})
	t.Logf("holder RSS: %d KiB in a text wait, %d KiB in an idle wait", base>>10, idle>>10)
	if idle > base+8<<20 && !raceEnabled { // (the race detector's shadow memory grows with the heap)
		t.Errorf("an idle wait grew the holder by %d KiB in 7 s", (idle-base)>>10)
	}
}

// TestAttackSendsToAProgramThatDoesNotRead: sends to a program that reads
// none of its input, each given up by its client, leave nothing behind
// in the holder (each used to keep its goroutine and its data for as
// long as the program did not read), and the holder answers meanwhile.
func TestAttackSendsToAProgramThatDoesNotRead(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "stty raw -echo; echo ready; exec sleep 600"}, ScrollbackBytes: -1})
	waitText(t, tm, "ready")
	data := bytes.Repeat([]byte("z"), maxSendChunk)
	before := vmRSS(t, tm.HolderPid())
	for i := 0; i < 150; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := tm.Send(ctx, data)
		cancel()
		if err == nil {
			t.Fatalf("send %d to a program that reads nothing succeeded", i)
		}
	}
	time.Sleep(500 * time.Millisecond)
	after := vmRSS(t, tm.HolderPid())
	t.Logf("holder RSS %d KiB before, %d KiB after 150 abandoned sends of %d KiB", before>>10, after>>10, len(data)>>10)
	if after > before+40<<20 && !raceEnabled {
		t.Errorf("abandoned sends grew the holder by %d MiB", (after-before)>>20)
	}
	alive(t, tm, 80, 24)
}

// TestAttackDetachFromAProgramThatDoesNotRead: a client that pasted more
// than the program reads can still detach (its input used to stop the
// holder's reading of its frames, so the detach was never seen and the
// client waited for its reset forever).
func TestAttackDetachFromAProgramThatDoesNotRead(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "stty raw -echo; echo ready; exec sleep 600"}, ScrollbackBytes: -1})
	waitText(t, tm, "ready")
	a, err := tm.Attach(ctx10(t), AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rd := readAttachment(a, 80, 24)
	wrote := make(chan error, 1)
	go func() {
		_, err := a.Write(bytes.Repeat([]byte("p"), 3<<20))
		if err == nil {
			err = a.Detach()
		}
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("paste, then detach: %v", err)
		}
	case <-time.After(10 * time.Second):
		a.Close()
		<-wrote
		rd.end(t)
		t.Fatal("a 3 MiB paste to a program that reads nothing blocked the client's detach for 10 s")
	}
	select {
	case <-rd.done:
		if rd.err != ErrDetached {
			t.Errorf("the attachment ended with %v, not a detach", rd.err)
		}
	case <-time.After(10 * time.Second):
		a.Close()
		rd.end(t)
		t.Fatal("no reset within 10 s of the detach")
	}
	alive(t, tm, 80, 24)
}

// TestAttackHolderOutOfDescriptors: a client that opens connections until
// the holder runs out of descriptors must not make it stop serving for
// good: once they are closed, the holder answers again.
func TestAttackHolderOutOfDescriptors(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh"}})
	lim := unix.Rlimit{Cur: 64, Max: 64}
	if err := unix.Prlimit(tm.HolderPid(), unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Skipf("cannot lower the holder's descriptor limit: %v", err)
	}
	var conns []net.Conn
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout("unix", filepath.Join(tm.Dir(), holder.SocketName), time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond) // the holder meets its limit
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := tm.Screen(ctx, ScreenOptions{}); err != nil {
		t.Fatalf("after %d connections were opened and closed, the holder no longer serves: %v", len(conns), err)
	}
}

// TestAttackCostlyWaitPattern: a wait whose pattern costs much to match
// (a huge alternation, matched again at every change of a busy screen)
// must not hold up the others' calls on the session.
func TestAttackCostlyWaitPattern(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo line $i abababababababababababababababababababababababababababababababab; sleep 0.01; done"}})
	pat := strings.Repeat("(?:(?:a|b)?){1000}", 20) + "never" // about 1 s a match on 80x24
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm.Wait(ctx10(t), WaitOptions{Text: pat, Timeout: 6 * time.Second})
	}()
	time.Sleep(time.Second)
	var worst time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		if _, err := tm.Screen(ctx10(t), ScreenOptions{}); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
		time.Sleep(200 * time.Millisecond)
	}
	<-done
	t.Logf("the slowest screen beside a costly wait took %v", worst)
	if worst > 500*time.Millisecond {
		t.Errorf("a wait with a costly pattern held a screen up for %v", worst)
	}
}

// TestAttackWholeScrollback: a screen with all of a full scrollback (more
// than one frame's payload) comes back whole.
func TestAttackWholeScrollback(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "seq 1 400000; echo end-of-seq; exec sleep 600"}})
	waitText(t, tm, "^end-of-seq$")
	s, err := tm.Screen(ctx10(t), ScreenOptions{Scrollback: -1})
	if err != nil {
		t.Fatalf("the whole scrollback: %v", err)
	}
	if n := len(s.Scrollback); n < 100000 || s.Scrollback[n-1] != "399978" {
		t.Errorf("%d scrollback rows, the last %q", n, s.Scrollback[n-1])
	}
}

// TestAttackAnswerNeverRead: a client that asks for a big answer (a
// screen with its whole scrollback) and never reads it does not keep the
// holder's goroutine and the answer for ever: after the answer bound the
// holder lets the connection go.
func TestAttackAnswerNeverRead(t *testing.T) {
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "seq 1 400000; echo end-of-seq; exec sleep 600"}})
	waitText(t, tm, "^end-of-seq$")
	conn, err := net.Dial("unix", filepath.Join(tm.Dir(), holder.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.UnixConn).SetReadBuffer(4096)
	if err := holder.WriteJSON(conn, holder.FrameRequest, holder.Request{Op: "screen", Scrollback: -1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(answerBound + 2*time.Second)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = holder.ReadJSON(bufio.NewReader(conn))
	if err == nil {
		t.Fatalf("the holder waited %v and more for a client to read its answer", answerBound)
	}
	t.Logf("read after %v: %v", answerBound+2*time.Second, err)
	alive(t, tm, 80, 24)
}

// answerBound is the holder's (internal/holder) bound on writing an
// answer.
const answerBound = 10 * time.Second
