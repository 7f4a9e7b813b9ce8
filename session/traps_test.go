//go:build linux

package session

import (
	"strings"
	"testing"
	"time"
)

// TestVerboseEchoesOnlyTheUsersCode: set -v makes the shell echo its
// input as it reads it; corral's own lines are never echoed, the
// command's are, as a script's would be, from the command after the one
// that turned verbose on (a line is echoed when it is read, and the
// command that turns verbose on was read before it ran, as under bash -c).
func TestVerboseEchoesOnlyTheUsersCode(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		bash := shellName(s) == "bash"
		check := func(code, wantOut, wantErr string, dashErr ...string) {
			t.Helper()
			out, errs, r, err := runBounded(t, s, code)
			if err != nil || out != wantOut {
				t.Fatalf("%q: %q %q %+v %v", code, out, errs, r, err)
			}
			if !bash && len(dashErr) > 0 {
				wantErr = dashErr[0]
			}
			if errs != wantErr {
				t.Fatalf("%q: stderr %q, want %q", code, errs, wantErr)
			}
		}
		check("set -v; echo x", "x\n", "")
		check("echo y", "y\n", "echo y\n")
		check("echo a\necho b", "a\nb\n", "echo a\necho b\n")
		check("echo 'q\nr' >&2", "", "echo 'q\nr' >&2\nq\nr\n")
		check(`case $- in *v*) echo on;; esac`, "on\n", "case $- in *v*) echo on;; esac\n")
		// bash marks what eval runs with a second +.
		check("set -x; echo t", "t\n", "set -x; echo t\n++ echo t\n", "set -x; echo t\n+ echo t\n")
		check("echo t", "t\n", "echo t\n++ echo t\n", "echo t\n+ echo t\n")
		check("set +x; echo u", "u\n", "set +x; echo u\n++ set +x\n", "set +x; echo u\n+ set +x\n")
		// With stdin, the line names the FIFO: still only the code.
		out, errs, r, err := run(t, s, "cat; echo v", Options{Stdin: strings.NewReader("in\n"), Timeout: 5 * time.Second})
		if err != nil || out != "in\nv\n" || errs != "cat; echo v\n" {
			t.Fatalf("with stdin: %q %q %+v %v", out, errs, r, err)
		}
		check("set +v; echo z", "z\n", "set +v; echo z\n")
		check("echo w", "w\n", "")
		if st := s.State(); st.Resets != 0 {
			t.Fatalf("the session was reset: %+v", st)
		}
	})
}

// TestTrapsSeeCorralsLines pins what DEBUG and ERR traps still see of
// corral's protocol in bash (why it cannot be helped: shell_unix.go, on
// the protocol): a DEBUG trap fires three times before the code (for the
// call of Fo, which gives the command its FIFOs and the set -T that keeps
// the trap for the sourced file, the source, the file's set +T) and once
// after it (for the protocol's call), besides once for
// each of the code's commands; an ERR trap fires once more, for the source, after
// a failing command. dash has neither trap.
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
		// Before the code (Fo, source, set +T), the code's two
		// commands, after it (the protocol's call).
		if got := mustRun(t, s, "echo a; echo b"); got != "D\nD\nD\na\nD\nb\nD\n" {
			t.Fatalf("DEBUG trap: %q", got)
		}
		// Cleared by a command, the trap still fires for what comes
		// before the code and for the trap builtin, not for the
		// protocol's call.
		if got := mustRun(t, s, "trap - DEBUG"); got != "D\nD\nD\n" {
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
		// Once for false, once more for the source that returns its
		// status.
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

// TestSinkReplacesTheEcho: the echo of corral's line (dash under set -v)
// is replaced by the code's lines however the reads split it, and stderr
// that is not that echo comes out whole.
func TestSinkReplacesTheEcho(t *testing.T) {
	nonce := "N0nce0000000"
	line := protoFor("dash", "").commandLineV("echo a\necho b", nonce, "", false, false, false, true, false)
	echo, as := echoedLine(line, "echo a\necho b")
	if !strings.HasPrefix(string(echo), `\eval 'echo a`) || !strings.HasSuffix(string(echo), "b'\n") || string(as) != "echo a\necho b\n" {
		t.Fatalf("echoedLine(%q) = %q, %q", line, echo, as)
	}
	for _, tc := range []struct{ in, want string }{
		{string(echo) + "a-err\n", "echo a\necho b\na-err\n"},
		{string(echo), "echo a\necho b\n"},
		{"other\n", "other\n"},
		{string(echo[:5]) + "X", string(echo[:5]) + "X"},
		{"", ""},
		{string(echo[:5]), string(echo[:5])},
	} {
		for step := 1; step <= len(tc.in)+1; step++ {
			var errb strings.Builder
			k := newSink(nonce, time.Now(), Options{Stderr: &errb}, false)
			k.echo, k.echoAs = echo, as
			stream := tc.in + "\x1fcorral:" + nonce + " 0\x1f"
			if !strings.HasSuffix(tc.in, "\n") {
				stream = tc.in // cut short: the sink is closed without a marker
			}
			for b := stream; len(b) > 0; {
				n := min(step, len(b))
				k.feed(1, []byte(b[:n]), time.Now())
				b = b[n:]
			}
			k.close()
			if errb.String() != tc.want {
				t.Fatalf("%q in reads of %d: stderr %q, want %q", stream, step, errb.String(), tc.want)
			}
		}
	}
}

// TestStderrAfterASlowEndUnderXtrace: under xtrace the call that ends a
// command runs with the shell's stderr closed (commandLineS), and the
// shell may still be there, its stderr not yet given back, when the next
// command starts: a slow CPU, or (here, every time) a RETURN trap that
// takes its time as that call returns. The next command's stderr is still
// its own, not the last command's, whose output is the background's. A
// stderr the command closed itself under xtrace stays closed, as on a
// script's next line.
func TestStderrAfterASlowEndUnderXtrace(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) == "bash" {
			// functrace, so that the trap fires as corral's function
			// returns.
			mustRun(t, s, "set -T; trap 'sleep 0.3' RETURN; set -x")
			mustRun(t, s, ":") // ends with the trap's sleep, stderr closed
			s.TakeBackground()
			out, errs, r, err := runBounded(t, s, "echo to-stdout; echo to-stderr >&2")
			if err != nil || r.ExitCode != 0 || out != "to-stdout\n" || !strings.Contains(errs, "\nto-stderr\n") {
				t.Fatalf("after a slow end under xtrace: %q %q exit %d %v (background stderr %q)", out, errs, r.ExitCode, err, s.TakeBackground().Stderr)
			}
			mustRun(t, s, "set +xT; trap - RETURN")
		}
		mustRun(t, s, "set -x")
		if out, _, r, err := runBounded(t, s, "exec 2>&-; echo hi"); err != nil || out != "hi\n" || r.ExitCode != 0 {
			t.Fatalf("exec 2>&- under xtrace: %q %+v %v", out, r, err)
		}
		out, errs, _, _ := runBounded(t, s, "echo next; echo lost >&2")
		if out != "next\n" || errs != "" {
			t.Fatalf("after exec 2>&- under xtrace, stderr came back: %q %q", out, errs)
		}
		if s.State().Resets != 0 {
			t.Fatalf("the session restarted: %+v", s.State())
		}
	})
}
