//go:build linux

package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLineNumbersCountTheCommandsOwnLines: in bash, $LINENO, error
// messages and caller count the lines of the command itself from 1, as
// bash -c CODE does, whatever came before in the session.
func TestLineNumbersCountTheCommandsOwnLines(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("dash's line numbers are right already")
		}
		if got := mustRun(t, s, "echo $LINENO\necho $LINENO"); got != "1\n2\n" {
			t.Fatalf("LINENO in a first command: %q", got)
		}
		mustRun(t, s, "x=1\ny=2\nz=3")
		out, errs, r, err := runBounded(t, s, "echo a\n\nnot_a_command_xq\necho $LINENO")
		if err != nil || out != "a\n4\n" || r.ExitCode != 0 {
			t.Fatalf("third command: %q %q %+v %v", out, errs, r, err)
		}
		if !strings.HasSuffix(errs, ": line 3: not_a_command_xq: command not found\n") || strings.Count(errs, "\n") != 1 {
			t.Fatalf("the error on line 3 of a later command says %q", errs)
		}
		if got := mustRun(t, s, "f() {\n  echo \"$LINENO ${BASH_LINENO[0]}\"\n}\n\nf"); got != "2 5\n" {
			t.Fatalf("a function's LINENO and its caller's line: %q", got)
		}
		// What xtrace and verbose left on does not move the count.
		mustRun(t, s, "set -x")
		out, errs, _, _ = runBounded(t, s, "echo $LINENO\necho $LINENO")
		// (bash marks what source runs with a second +, as what eval runs.)
		if out != "1\n2\n" || errs != "++ echo 1\n++ echo 2\n" {
			t.Fatalf("under set -x: %q %q", out, errs)
		}
		mustRun(t, s, "set +x; set -v")
		out, errs, _, _ = runBounded(t, s, "echo $LINENO\necho $LINENO")
		if out != "1\n2\n" || errs != "echo $LINENO\necho $LINENO\n" {
			t.Fatalf("under set -v: %q %q", out, errs)
		}
		mustRun(t, s, "set +v")
	})
}

// TestSourcedCodeAcrossCommands: what the code file changes beyond line
// numbers. A DEBUG trap set by one command fires for the next command's
// code (bash's source sets it aside otherwise), $? still carries the
// last status with that trap set, and return at top level ends the
// command with its status, as in a sourced script (bash -c CODE says it
// can only return from a function or sourced script, and goes on).
func TestSourcedCodeAcrossCommands(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("bash only")
		}
		mustRun(t, s, "n=0; trap 'n=$((n+1))' DEBUG")
		if got := mustRun(t, s, "n=0\n:\n:\necho $n"); got != "3\n" {
			t.Fatalf("a DEBUG trap of an earlier command counted %q of the code's 3 commands before echo", got)
		}
		if _, _, r, _ := runBounded(t, s, "false"); r.ExitCode != 1 {
			t.Fatalf("false: %+v", r)
		}
		if got := mustRun(t, s, "echo $?"); got != "1\n" {
			t.Fatalf("$? after false, with a DEBUG trap: %q", got)
		}
		runBounded(t, s, "false")
		if got := mustRun(t, s, "# only a comment"); got != "" {
			t.Fatalf("a comment after a failure: %q", got)
		}
		if got := mustRun(t, s, "trap - DEBUG; echo $-"); strings.Contains(got, "T") {
			t.Fatalf("functrace left on: %q", got)
		}
		out, _, r, _ := runBounded(t, s, "return 3\necho not-reached")
		if out != "" || r.ExitCode != 3 {
			t.Fatalf("return at top level: %q %+v", out, r)
		}
		if got := mustRun(t, s, "echo next"); got != "next\n" || s.State().Resets != 0 {
			t.Fatalf("after return: %q %+v", got, s.State())
		}
	})
}

// TestDebugTrapFromASourcedFile: a DEBUG trap set by a file a command
// sources (as bash-preexec and prompt tools do), so that the command's
// own code never names DEBUG, keeps firing in later commands' code.
func TestDebugTrapFromASourcedFile(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("bash only")
		}
		// (Not under t.TempDir: its name holds the test's, which says Debug.)
		dir, err := os.MkdirTemp("", "corral-rc")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		rc := filepath.Join(dir, "rc")
		if err := os.WriteFile(rc, []byte("n=0; trap 'n=$((n+1))' DEBUG\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		mustRun(t, s, ". "+rc)
		if got := mustRun(t, s, "n=0\n:\n:\necho $n"); got != "3\n" {
			t.Fatalf("a DEBUG trap set by a sourced file counted %q of the code's 3 commands before echo", got)
		}
	})
}
