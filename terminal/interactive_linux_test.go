//go:build linux

package terminal

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/testproc"
)

// attachMain attaches the terminal it runs in (a tmux pane) to the
// session in dir, then says how it ended and whether the terminal's
// settings came back.
func attachMain(dir string) int {
	before, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		fmt.Println("no terminal:", err)
		return 1
	}
	tm, err := Dial(context.Background(), dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	st, err := AttachTerminal(context.Background(), tm, os.Stdin, os.Stdout, TerminalOptions{})
	after, _ := unix.IoctlGetTermios(0, unix.TCGETS)
	restored := *after == *before
	fl, _ := unix.FcntlInt(0, unix.F_GETFL, 0)
	switch {
	case err != nil:
		fmt.Printf("attach failed: %v\n", err)
	case st == nil:
		fmt.Printf("detached restored=%v nonblock=%v\n", restored, fl&unix.O_NONBLOCK != 0)
	default:
		fmt.Printf("exited %d restored=%v\n", st.ExitCode, restored)
	}
	return 0
}

// TestAttachTerminalInTmux attaches a real terminal (a tmux pane) to a
// session running vim: the pane shows the session's screen at once, keys
// typed in the pane reach vim, ctrl-\ detaches, and then the pane's
// terminal has its settings back and none of vim's modes left (alternate
// screen, mouse, application cursor keys).
func TestAttachTerminalInTmux(t *testing.T) {
	need(t, "vim")
	mark := testproc.Guard(t, 2*time.Minute)
	tm := openTest(t, mark, Config{Path: "vim", Args: []string{"vim", "-u", "NONE", "-i", "NONE", "-N", "-n", "--cmd", "set mouse=a"}})
	waitText(t, tm, "(?m)^~")
	tm.Send(ctx10(t), []byte("ifirst line\x1b"))
	waitText(t, tm, "first line")
	settle(t, tm)
	p := newPane(t, mark, 80, 24, append(progEnv(mark), attachEnv+"="+tm.Dir()), os.Args[0])
	modes := func() string {
		return strings.TrimSpace(p.Run("display", "-p", "-t", "s",
			"alt=#{alternate_on} mouse=#{mouse_standard_flag}#{mouse_button_flag}#{mouse_any_flag}#{mouse_sgr_flag} ckm=#{keypad_cursor_flag} cursor=#{cursor_flag}"))
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Run("capture-pane", "-p", "-t", "s"), "first line") {
		if time.Now().After(deadline) {
			t.Fatalf("the pane never showed the session:\n%s", p.Run("capture-pane", "-p", "-t", "s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The redraw reaches the pane in pieces ("first line" may show
	// before the last row is drawn): wait for it to be whole.
	var got, wantText string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		want, err := tm.Screen(ctx10(t), ScreenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, wantText = "", want.Text
		if got, _ = p.screen(); got == wantText || time.Now().After(deadline) {
			break
		}
	}
	if got != wantText {
		t.Errorf("the attached pane differs from the session's screen:\n%s", diffRows(got, wantText))
	}
	if m := modes(); !strings.Contains(m, "alt=1") || strings.Contains(m, "mouse=0000") {
		t.Errorf("vim's modes did not reach the attached terminal: %s", m)
	}
	p.send([]byte("otyped in the pane\x1b"))
	waitText(t, tm, "typed in the pane")
	p.send([]byte{DefaultDetachKey})
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Run("capture-pane", "-p", "-t", "s"), "detached") {
		if time.Now().After(deadline) {
			t.Fatalf("no detach:\n%s", p.Run("capture-pane", "-p", "-t", "s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _ := p.screen()
	if !strings.Contains(out, "detached restored=true nonblock=false") {
		t.Errorf("the terminal's settings after detach: %s", out)
	}
	if m := modes(); m != "alt=0 mouse=0000 ckm=0 cursor=1" {
		t.Errorf("modes left on the terminal after detach: %s", m)
	}
	st, err := tm.Status(ctx10(t))
	if err != nil || st.Exited {
		t.Errorf("vim did not survive the detach: %+v, %v", st, err)
	}
}
