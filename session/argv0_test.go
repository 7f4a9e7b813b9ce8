//go:build linux

package session

import (
	"os"
	"strings"
	"testing"
)

// TestDollarZeroIsTheShell: $0 is the shell's name, as in bash -c CODE
// (dash -c CODE), not the channel the shell reads its commands from
// (/dev/fd/3), and so is the name dash's error messages start with. bash
// starts them with the name of the file it sources the code from
// (BASH_SOURCE, codeName in the session's directory) and the line: this
// pins that difference (see the README).
func TestDollarZeroIsTheShell(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		sh := shellName(s)
		if got := mustRun(t, s, `echo "$0"`); got != sh+"\n" {
			t.Fatalf("$0 is %q, want %s", got, sh)
		}
		want := sh + ": "
		if sh == "bash" {
			want = s.dir + "/" + codeName + ": line 1: "
		}
		_, errs, _, _ := run(t, s, "corral_no_such_command")
		if !strings.HasPrefix(errs, want) {
			t.Fatalf("the error message %v does not start with %v", []byte(errs), []byte(want))
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
