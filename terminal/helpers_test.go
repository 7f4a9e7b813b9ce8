//go:build linux

package terminal

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tmuxtest"
	"github.com/corral-dev/corral/internal/vt"
)

// progEnv is the environment of the programs under test, the same in the
// holder and in tmux: the test's marker, a fixed TERM, prompt and locale.
func progEnv(mark string) []string {
	return []string{mark, "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.TempDir(), "TERM=xterm-256color",
		"PS1=$ ", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "LESSHISTFILE=-", "SHELL=/bin/sh"}
}

// openTest opens a session in a fresh directory with the test binary as
// its holder, and closes it at cleanup.
func openTest(t *testing.T, mark string, cfg Config) *Term {
	t.Helper()
	cfg.Holder = []string{os.Args[0]}
	cfg.HolderEnv = append(testproc.Env(mark), holderEnv+"=1")
	if cfg.Env == nil {
		cfg.Env = progEnv(mark)
	}
	dir := filepath.Join(testproc.TempDir(t), "sess")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tm, err := Open(ctx, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := tm.Close(ctx); err != nil && !errors.Is(err, ErrGone) {
			t.Errorf("close: %v", err)
		}
	})
	return tm
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// settle waits until the session's output has been quiet for a moment.
func settle(t *testing.T, tm *Term) {
	t.Helper()
	r, err := tm.Wait(ctx10(t), WaitOptions{Idle: 300 * time.Millisecond, Timeout: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reason != "idle" {
		t.Fatalf("output never went quiet: %s", r.Reason)
	}
}

func waitText(t *testing.T, tm *Term, re string) {
	t.Helper()
	r, err := tm.Wait(ctx10(t), WaitOptions{Text: re, Timeout: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reason != "text" {
		s, _ := tm.Screen(ctx10(t), ScreenOptions{})
		t.Fatalf("%q never appeared (%s); screen:\n%s", re, r.Reason, s.Text)
	}
}

// pane is a program in a tmux pane on a private server: the oracle.
type pane struct {
	*tmuxtest.Server
	t testing.TB
}

func newPane(t testing.TB, mark string, cols, rows int, env []string, argv ...string) *pane {
	t.Helper()
	conf := "set -g status off\nset -g exit-empty off\nset -g default-terminal xterm-256color\nset -g history-limit 10000\nset -g escape-time 0\n"
	p := &pane{Server: tmuxtest.New(t, testproc.TempDir(t), conf, testproc.Env(mark)), t: t}
	var sh strings.Builder
	sh.WriteString("exec env -i")
	for _, e := range env {
		sh.WriteString(" " + shQuote(e))
	}
	// The pane outlives the program (as the holder's screen does), so
	// the screen it left can be compared.
	sh.WriteString(` /bin/sh -c '"$@"; exec sleep 600' sh`)
	for _, a := range argv {
		sh.WriteString(" " + shQuote(a))
	}
	p.Run("new-session", "-d", "-s", "s", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), sh.String())
	return p
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// send types b into the pane, byte for byte.
func (p *pane) send(b []byte) {
	p.t.Helper()
	args := []string{"send-keys", "-t", "s", "-H"}
	for _, c := range b {
		args = append(args, hex.EncodeToString([]byte{c}))
	}
	p.Run(args...)
}

// screen returns the pane's text and cursor once two reads 300 ms apart
// agree.
func (p *pane) screen() (string, string) {
	p.t.Helper()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(300 * time.Millisecond)
		s := p.Run("capture-pane", "-p", "-t", "s") + "|" + strings.TrimSpace(p.Run("display", "-p", "-t", "s", "#{cursor_x},#{cursor_y}"))
		if s == last || time.Now().After(deadline) {
			i := strings.LastIndexByte(s, '|')
			return s[:i], s[i+1:]
		}
		last = s
	}
}

// compare drives the holder's session and the tmux pane with the same
// steps and fails where their screens differ after a step.
func compare(t *testing.T, tm *Term, p *pane, steps []string) {
	t.Helper()
	compareAs(t, tm, p, steps, func(s string) string { return s })
}

// compareAs is compare with the holder's screen seen through view (as
// tmux keeps it) before it is compared.
func compareAs(t *testing.T, tm *Term, p *pane, steps []string, view func(string) string) {
	t.Helper()
	settle(t, tm)
	check := func(step string) {
		t.Helper()
		settle(t, tm)
		want, wantCur := p.screen()
		s, err := tm.Screen(ctx10(t), ScreenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := view(s.Text)
		if cur := fmt.Sprintf("%d,%d", s.CursorX, s.CursorY); got != want || cur != wantCur {
			t.Errorf("after %q: screens differ (cursor tmux %s, holder %s):\n%s", step, wantCur, cur, diffRows(want, got))
		}
	}
	check("start")
	for _, k := range steps {
		if err := tm.Send(ctx10(t), []byte(k)); err != nil {
			t.Fatal(err)
		}
		p.send([]byte(k))
		check(k)
	}
}

func diffRows(want, got string) string { return tmuxtest.DiffRows(want, got, "tmux", "holder") }

func need(t *testing.T, prog string) {
	if _, err := exec.LookPath(prog); err != nil {
		t.Skipf("%s is not installed (apt-get install -y %s)", prog, map[string]string{"top": "procps"}[prog]+prog)
	}
}

// reader reads an attachment into a screen model of the client's
// terminal in a goroutine of its own; wait waits for text on it.
type reader struct {
	a    *Attachment
	mu   sync.Mutex
	vt   *vt.Terminal
	raw  []byte
	err  error
	done chan struct{}
}

func readAttachment(a *Attachment, cols, rows int) *reader {
	r := &reader{a: a, vt: vt.New(cols, rows, vt.Options{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 32<<10)
		for {
			n, err := a.Read(buf)
			r.mu.Lock()
			r.vt.Write(buf[:n])
			r.raw = append(r.raw, buf[:n]...)
			if err != nil {
				r.err = err
			}
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *reader) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vt.Text()
}

func (r *reader) waitFor(t *testing.T, sub string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.text(), sub) {
		if time.Now().After(deadline) {
			t.Fatalf("the attached client never showed %q; it shows:\n%s", sub, r.text())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// end waits for the reader to stop and returns its error.
func (r *reader) end(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the attachment never ended")
	}
	return r.err
}

var _ = io.EOF
