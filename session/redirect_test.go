//go:build linux

package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecMovesTheShellsOutput: a command that moves the shell's own
// stdout or stderr with exec (exec >file, exec 1>&2, exec 2>&1, a swap
// through 3) behaves as in bash: its output goes where it sent it, for it
// and for the commands after it (the shell is the same shell), it ends with
// its own status, and nothing of corral's (its marker, export -p, a NUL)
// lands in the user's file: the markers go through the shell's own copies
// of the session's stdout and stderr (markOutFd, markErrFd), owned or held.
func TestExecMovesTheShellsOutput(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		dir := t.TempDir()
		file := filepath.Join(dir, "out.txt")

		out, errs, r, err := run(t, s, "exec >'"+file+"'; echo hi")
		if err != nil || r.ExitCode != 0 || r.Error != "" || out != "" {
			t.Fatalf("exec >file: out %q err %q %+v %v", out, errs, r, err)
		}
		out, errs, r, err = run(t, s, "echo next; echo to-err >&2")
		if err != nil || r.ExitCode != 0 || out != "" || errs != "to-err\n" {
			t.Fatalf("after exec >file: out %q err %q %+v %v", out, errs, r, err)
		}
		if b, _ := os.ReadFile(file); string(b) != "hi\nnext\n" {
			t.Fatalf("the user's file holds %q, want only the commands' output", b)
		}
		// Give the shell its stdout back, through what the session keeps.
		out, errs, r, err = run(t, s, "exec 1>&2; echo moved; exit 3")
		if r == nil || r.ExitCode != 3 || out != "" || !strings.Contains(errs, "moved\n") {
			t.Fatalf("exec 1>&2: out %q err %q %+v %v", out, errs, r, err)
		}
		// exit 3 ended the shell: the next command has a fresh one.
		out, errs, r, err = run(t, s, "exec 2>&1; echo a; echo b >&2")
		if err != nil || r.ExitCode != 0 || out != "a\nb\n" || errs != "" || r.Error != "" {
			t.Fatalf("exec 2>&1: out %q err %q %+v %v", out, errs, r, err)
		}
		// Both are stdout now, for this shell and the commands after;
		// exit gives the next command a fresh shell.
		if out, _, _, _ := run(t, s, "echo c >&2; exit"); out != "c\n" {
			t.Fatalf("after exec 2>&1, stderr went to %q, not stdout", out)
		}
		out, errs, r, err = run(t, s, "exec 3>&1 1>&2 2>&3 3>&-; echo x; echo y >&2")
		if err != nil || r.ExitCode != 0 || out != "y\n" || errs != "x\n" || r.Error != "" {
			t.Fatalf("swap: out %q err %q %+v %v", out, errs, r, err)
		}
		if got := s.State(); !got.Alive || got.Resets != 2 {
			t.Fatalf("state %+v: the only resets should be those the two exits made", got)
		}
	})
}
