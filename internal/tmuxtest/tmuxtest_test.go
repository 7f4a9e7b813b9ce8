package tmuxtest

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestServer: a program runs in a pane of the test's own server, its
// screen can be read, and the cleanup leaves nothing of the server
// (the Guard, whose check runs after that cleanup, fails the test if a
// process with the marker survives).
func TestServer(t *testing.T) {
	mark := testproc.Guard(t, time.Minute)
	s := New(t, testproc.TempDir(t), "set -g status off\nset -g exit-empty off\n", testproc.Env(mark))
	s.Run("new-session", "-d", "-s", "s", "-x", "40", "-y", "5", "sh", "-c", "echo in-the-pane; exec sleep 600")
	var screen string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if screen = s.Run("capture-pane", "-p", "-t", "s"); strings.Contains(screen, "in-the-pane") {
			break
		}
	}
	if !strings.HasPrefix(screen, "in-the-pane\n") {
		t.Fatalf("the pane shows %q", screen)
	}
	if size := strings.TrimSpace(s.Run("display", "-p", "-t", "s", "#{pane_width}x#{pane_height}")); size != "40x5" {
		t.Errorf("the pane is %s, want 40x5 (status off)", size)
	}
}

func TestDiffRows(t *testing.T) {
	got := DiffRows("a\nb\nc", "a\nB", "tmux", "holder")
	want := "row 1:\n  tmux   \"b\"\n  holder \"B\"\nrow 2:\n  tmux   \"c\"\n  holder \"\"\n"
	if got != want {
		t.Errorf("DiffRows = %q, want %q", got, want)
	}
	if d := DiffRows("same\nrows", "same\nrows", "tmux", "vt"); d != "" {
		t.Errorf("DiffRows of equal screens = %q", d)
	}
}
