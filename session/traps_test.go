//go:build linux

package session

import (
	"strings"
	"testing"
)

// TestVerboseEchoesOnlyTheUsersCode: set -v makes the shell echo its
// input as it reads it; corral's own lines are never echoed. bash echoes
// the command's lines as a script's would be, from the command after the
// one that turned verbose on (a line is echoed when it is read, and the
// command that turns verbose on was read before it ran, as under bash -c).
// dash does not echo what eval runs, so under dash set -v echoes nothing
// at all (documented in shell_unix.go).
func TestVerboseEchoesOnlyTheUsersCode(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		bash := shellName(s) == "bash"
		check := func(code, wantOut, wantErr string, dashErr ...string) {
			t.Helper()
			out, errs, r, err := runBounded(t, s, code)
			if err != nil || out != wantOut {
				t.Fatalf("%q: %q %q %+v %v", code, out, errs, r, err)
			}
			if !bash {
				wantErr = strings.Join(dashErr, "")
			}
			if errs != wantErr {
				t.Fatalf("%q: stderr %q, want %q", code, errs, wantErr)
			}
		}
		check("set -v; echo x", "x\n", "")
		check("echo y", "y\n", "echo y\n")
		check("echo a\necho b", "a\nb\n", "echo a\necho b\n")
		check(`case $- in *v*) echo on;; esac`, "on\n", "case $- in *v*) echo on;; esac\n")
		// bash marks what eval runs with a second +.
		check("set -x; echo t", "t\n", "set -x; echo t\n++ echo t\n", "+ echo t\n")
		check("echo t", "t\n", "echo t\n++ echo t\n", "+ echo t\n")
		check("set +x; echo u", "u\n", "set +x; echo u\n++ set +x\n", "+ set +x\n")
		check("set +v; echo z", "z\n", "set +v; echo z\n")
		check("echo w", "w\n", "")
		if st := s.State(); st.Resets != 0 {
			t.Fatalf("the session was reset: %+v", st)
		}
	})
}

// TestTrapsSeeCorralsLines pins what DEBUG and ERR traps still see of
// corral's protocol in bash (why it cannot be helped: shell_unix.go, on
// the protocol): a DEBUG trap fires once before the code (for the eval)
// and once after it (for the protocol's call), besides once for each of
// the code's commands; an ERR trap fires once more, for the eval, after a
// failing command. dash has neither trap.
func TestTrapsSeeCorralsLines(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			out, errs, r, err := runBounded(t, s, "trap 'echo D' DEBUG; echo rc=$?; trap 'echo E' ERR; echo rc=$?")
			if err != nil || out != "rc=1\nrc=1\n" || !strings.Contains(errs, "DEBUG") || !strings.Contains(errs, "ERR") {
				t.Fatalf("dash took a DEBUG or ERR trap: %q %q %+v %v", out, errs, r, err)
			}
			return
		}
		mustRun(t, s, `trap 'echo "D"' DEBUG`)
		// Before the code (the eval), the code's two commands, after it
		// (the protocol's call).
		if got := mustRun(t, s, "echo a; echo b"); got != "D\nD\na\nD\nb\nD\n" {
			t.Fatalf("DEBUG trap: %q", got)
		}
		// Cleared by a command, the trap still fires for that command's
		// eval and for the trap builtin, not for the protocol's call.
		if got := mustRun(t, s, "trap - DEBUG"); got != "D\nD\n" {
			t.Fatalf("clearing the DEBUG trap: %q", got)
		}
		if got := mustRun(t, s, "echo a"); got != "a\n" {
			t.Fatalf("after clearing the DEBUG trap: %q", got)
		}
		mustRun(t, s, `trap 'echo "E:$?"' ERR`)
		out, _, r, _ := runBounded(t, s, "false; echo after")
		if out != "E:1\nafter\n" || r.ExitCode != 0 {
			t.Fatalf("ERR trap, a failing command that is not the last: %q %+v", out, r)
		}
		// Once for false, once more for the eval that returns its status.
		out, _, r, _ = runBounded(t, s, "echo before; false")
		if out != "before\nE:1\nE:1\n" || r.ExitCode != 1 {
			t.Fatalf("ERR trap, a failing last command: %q %+v", out, r)
		}
		if got := mustRun(t, s, "trap - ERR; true"); got != "" {
			t.Fatalf("clearing the ERR trap: %q", got)
		}
		if st := s.State(); st.Resets != 0 {
			t.Fatalf("the session was reset: %+v", st)
		}
	})
}
