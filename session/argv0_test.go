//go:build linux

package session

import (
	"os"
	"strings"
	"testing"
)

// TestDollarZeroIsTheShell: in a bash session $0 is "bash", as in bash -c
// CODE, not the channel the shell reads its commands from (/dev/fd/3).
func TestDollarZeroIsTheShell(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("only bash can set $0 from inside (BASH_ARGV0); dash's $0 stays /dev/fd/3 (see the README)")
		}
		if got := mustRun(t, s, `echo "$0"`); got != "bash\n" {
			t.Fatalf("$0 is %q, want bash", got)
		}
	})
}

// TestDeletedCwdSaidOnReset: a session that restores its cwd on a reset,
// whose saved cwd was removed, starts its fresh shell where it was created
// and the next result says so, instead of moving the user silently.
func TestDeletedCwdSaidOnReset(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		s.cfg.RestoreOnReset = true
		gone := t.TempDir() + "/gone"
		if err := os.Mkdir(gone, 0o755); err != nil {
			t.Fatal(err)
		}
		mustRun(t, s, "cd "+gone)
		os.Remove(gone)
		run(t, s, "exit 4") // a reset: the next command gets a fresh shell
		out, _, r, err := run(t, s, "pwd")
		if err != nil || out != s.cfg.Dir+"\n" {
			t.Fatalf("after the reset: %q %+v %v (want %s)", out, r, err, s.cfg.Dir)
		}
		if !strings.Contains(r.Error, gone) || !strings.Contains(r.Error, "is gone") {
			t.Fatalf("the result does not say the cwd was gone: %q", r.Error)
		}
		if _, _, r, _ := run(t, s, "true"); r.Error != "" {
			t.Fatalf("the note was repeated: %q", r.Error)
		}
	})
}
