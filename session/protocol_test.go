//go:build linux

package session

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// runBounded runs code with a timeout, so that a protocol a command broke
// fails the test instead of hanging it.
func runBounded(t *testing.T, s *Session, code string) (string, string, *corral.Result, error) {
	t.Helper()
	var out, errb strings.Builder
	r, err := s.Exec(context.Background(), code, Options{Stdout: &out, Stderr: &errb, Timeout: 5 * time.Second})
	return out.String(), errb.String(), r, err
}

// shellName is the shell a session of these tests runs.
func shellName(s *Session) string { return s.cfg.Shell }

// TestProtocolNamesBelongToTheUser: a command may define, unset or alias
// any name, including the ones corral's protocol used to call (its
// function __c, printf, eval, export, cd, [, set, trap, read): the command
// and every later one still complete, with their own output and status.
func TestProtocolNamesBelongToTheUser(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		cases := []string{
			"__c() { :; }",
			"unset -f __c",
			"__c() { echo captured; }; alias __c='echo captured'",
			"printf() { :; }",
			"printf() { echo captured; }",
			"cd() { echo captured; }",
			"read() { echo captured; }",
			"alias eval='echo captured' printf='echo captured'",
		}
		if shellName(s) == "bash" {
			cases = append(cases,
				"[() { echo captured; }; test() { echo captured; }",
				"set() { echo captured; }; trap() { echo captured; }; unset() { echo captured; }",
				"shopt -s expand_aliases; alias eval='echo captured' printf='echo captured' __c='echo captured' export='echo captured'",
				"export() { echo captured; }; eval() { echo captured; }",
				"declare() { echo captured; }; readonly() { echo captured; }",
			)
		}
		for _, c := range cases {
			out, errs, r, err := runBounded(t, s, c+"; echo defined")
			if err != nil || out != "defined\n" {
				t.Fatalf("%q: %q %q %+v %v", c, out, errs, r, err)
			}
			for i := 0; i < 2; i++ {
				out, errs, r, err = runBounded(t, s, "echo next; false")
				if out != "next\n" || r.ExitCode != 1 || r.Outcome != "exited" {
					t.Fatalf("after %q: %q %q %+v %v", c, out, errs, r, err)
				}
			}
			mustRun(t, s, "unalias -a; unset -f __c printf export cd read test set trap declare readonly 2>/dev/null; true")
		}
		if s.State().Resets != 0 {
			t.Fatalf("the session was reset: %+v", s.State())
		}
	})
}

// TestEvalFunctionCannotCaptureTheSession: bash lets a command define a
// function named eval; it must not receive every later command.
func TestEvalFunctionCannotCaptureTheSession(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("only bash lets a function shadow the special builtin eval")
		}
		_, _, r, err := runBounded(t, s, "shopt -s expand_aliases; alias builtin='echo captured'; eval() { echo captured \"$@\"; }")
		if err != nil {
			t.Fatalf("%+v %v", r, err)
		}
		if !strings.Contains(r.Error, "eval") {
			t.Errorf("the result does not say that the function was removed: %+v", r)
		}
		out, errs, r, err := runBounded(t, s, "echo real")
		if err != nil || out != "real\n" {
			t.Fatalf("after eval(): %q %q %+v %v", out, errs, r, err)
		}
	})
}

// TestXtraceSeesOnlyTheUsersCode: under set -x the command's stderr holds
// the trace of its own commands, never corral's.
func TestXtraceSeesOnlyTheUsersCode(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		check := func(code, want string) {
			t.Helper()
			out, errs, r, err := runBounded(t, s, code)
			if err != nil || out != "x\n" {
				t.Fatalf("%q: %q %q %+v %v", code, out, errs, r, err)
			}
			// bash marks commands run by eval with a second +.
			trace := strings.TrimLeft(errs, "+")
			if trace != want || strings.Count(errs, "\n") != 1 {
				t.Fatalf("%q: stderr %q, want only the trace %q", code, errs, want)
			}
		}
		check("set -x; echo x", " echo x\n")
		check("echo x", " echo x\n")
		check("echo x", " echo x\n")
		check("set +x; echo x", " set +x\n")
		out, errs, _, err := runBounded(t, s, "echo x")
		if err != nil || out != "x\n" || errs != "" {
			t.Fatalf("after set +x: %q %q %v", out, errs, err)
		}
	})
}

// TestErrorsThatDiscardTheLine: bash throws away the rest of its input
// line after some errors inside eval; the command still completes, with
// the status bash gives it (1), and the session goes on.
func TestErrorsThatDiscardTheLine(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("bash only")
		}
		for _, c := range []string{"declare -i n; n=08", "a[1+]=1", "exit 7 8 9", "return 1 2", "shift 1 2"} {
			out, errs, r, _ := runBounded(t, s, c+"; echo not-reached")
			if r.Outcome != "exited" || r.ExitCode != 1 || out != "" || errs == "" {
				t.Fatalf("%q: %q %q %+v", c, out, errs, r)
			}
			if got := mustRun(t, s, "echo next"); got != "next\n" {
				t.Fatalf("after %q: %q", c, got)
			}
		}
		if s.State().Resets != 0 {
			t.Fatalf("the session was reset: %+v", s.State())
		}
	})
}

// TestRecordedCwdIsTheShellsOwn: a command that assigns PWD does not move
// the shell; the recorded cwd is where the shell really is, and stays the
// logical path (through a symlink) when that path is where it really is.
func TestRecordedCwdIsTheShellsOwn(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		dir, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		mustRun(t, s, "cd "+dir+"; PWD=/etc")
		if st := s.State(); st.Cwd != dir {
			t.Fatalf("cwd %q after PWD=/etc, want %q", st.Cwd, dir)
		}
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		mustRun(t, s, "cd "+link)
		if st := s.State(); st.Cwd != link {
			t.Fatalf("cwd %q after cd through a symlink, want %q", st.Cwd, link)
		}
		mustRun(t, s, "cd /; PWD="+link)
		if st := s.State(); st.Cwd != "/" {
			t.Fatalf("cwd %q after PWD=%s in /, want /", st.Cwd, link)
		}
	})
}

// TestRestartDropsWhatExecveCannotTake: an exported variable too large
// for execve (over 128 KiB) must not make every later start of the shell
// fail: the shell restarts with what fits, and the result says what was
// dropped. The same holds for a session whose initial environment has it
// (a daemon re-creating a session from its record).
func TestRestartDropsWhatExecveCannotTake(t *testing.T) {
	shellConfigs(t, 60*time.Second, Config{TrackEnv: true, RestoreOnReset: true}, func(t *testing.T, cfg Config, mark string) {
		s := newSession(t, cfg, mark)
		mustRun(t, s, `BIG=x; while [ ${#BIG} -lt 200000 ]; do BIG=$BIG$BIG; done; export BIG KEPT=yes`)
		runBounded(t, s, "exit 3") // a reset: the next command starts a fresh shell
		out, errs, r, err := runBounded(t, s, `echo "${#BIG} $KEPT"`)
		if err != nil || out != "0 yes\n" {
			t.Fatalf("after the reset: %q %q %+v %v", out, errs, r, err)
		}
		if !strings.Contains(r.Error, "BIG") {
			t.Fatalf("the result does not say what was dropped: %+v", r)
		}
		if got := mustRun(t, s, "echo ok"); got != "ok\n" {
			t.Fatalf("next: %q", got)
		}

		big := "BIG2=" + strings.Repeat("y", 200000)
		cfg2 := Config{Shell: cfg.Shell}
		if cfg.HoldDir != "" {
			cfg2.HoldDir = privateDir(t)
		}
		cfg2.Env = append(testproc.Env(mark), big, "KEPT2=yes")
		cfg2.Dir = t.TempDir()
		s2, err := New(cfg2)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		out, errs, r, err = runBounded(t, s2, `echo "${#BIG2} $KEPT2"`)
		if err != nil || out != "0 yes\n" || !strings.Contains(r.Error, "BIG2") {
			t.Fatalf("a session created with a too large variable: %q %q %+v %v", out, errs, r, err)
		}
	})
}

// TestShellThatStoppedAnsweringIsDetected: set -n makes the shell read
// but never run anything again, and a function named builtin (bash) takes
// the calls corral's function makes. Neither may hang the command until
// its timeout: corral sees the shell waiting for input with no answer
// given, says so and restarts the session.
func TestShellThatStoppedAnsweringIsDetected(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		cases := []string{"set -n"}
		if shellName(s) == "bash" {
			cases = []string{"set -n", "builtin() { :; }"}
		}
		for _, c := range cases {
			var out strings.Builder
			r, err := s.Exec(context.Background(), c, Options{Stdout: &out, Timeout: 8 * time.Second})
			if r.Outcome == corral.OutcomeTimeout || r.Duration > 5*time.Second || err == nil || !strings.Contains(r.Error, "stopped answering") {
				t.Fatalf("%q: %+v %v", c, r, err)
			}
			if got := mustRun(t, s, "echo ok"); got != "ok\n" {
				t.Fatalf("after %q: %q", c, got)
			}
		}
	})
}

// TestFunctionNamedCommand: in a POSIX shell a function named command,
// which would take the calls corral's function makes through command,
// works for the rest of its own command and is gone after it: the command
// ends as in sh -c, and the session goes on, with no restart.
func TestFunctionNamedCommand(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) == "bash" {
			t.Skip("bash calls builtin, not command")
		}
		out, errs, r, err := runBounded(t, s, "command() { echo MINE; }; command; echo hi")
		if err != nil || out != "MINE\nhi\n" || errs != "" || r.ExitCode != 0 || r.Error != "" {
			t.Fatalf("%q %q %+v %v", out, errs, r, err)
		}
		if got := mustRun(t, s, "echo ok"); got != "ok\n" || s.State().Resets != 0 {
			t.Fatalf("after: %q, %+v", got, s.State())
		}
	})
}

// TestClosedStderrRestarts: a command that closes the shell's stderr ends
// as in bash, and the shell goes on without a stderr, as a script would:
// the markers have descriptors of their own (markErrFd), owned or held.
func TestClosedStderrRestarts(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		out, errs, r, err := runBounded(t, s, "exec 2>&-; echo hi")
		if err != nil || out != "hi\n" || r.Error != "" || r.ExitCode != 0 {
			t.Fatalf("exec 2>&-: %q %q %+v %v", out, errs, r, err)
		}
		out, errs, r, err = runBounded(t, s, "echo next; echo lost >&2")
		if err == nil || out != "next\n" || errs != "" {
			t.Fatalf("after exec 2>&- (the write to the closed stderr fails): %q %q %+v %v", out, errs, r, err)
		}
		if s.State().Resets != 0 {
			t.Fatalf("the session restarted: %+v", s.State())
		}
	})
}

// TestMarkerDescriptorTaken: a bash command that takes one of the
// descriptors the shell reports on (exec 252>file) ends within bounds
// (its marker goes where the command sent it), its error names the
// descriptor, and the session goes on with a fresh shell.
func TestMarkerDescriptorTaken(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("dash cannot name a descriptor above 9")
		}
		for _, fd := range []int{markOutFd, markErrFd} {
			file := filepath.Join(t.TempDir(), "taken")
			code := fmt.Sprintf("exec %d>'%s'; echo hi", fd, file)
			out, _, r, err := runBounded(t, s, code)
			if r == nil || out != "hi\n" || !strings.Contains(r.Error, fmt.Sprintf("descriptor %d", fd)) || r.Duration > 5*time.Second {
				t.Fatalf("%s: %q %+v %v", code, out, r, err)
			}
			if got := mustRun(t, s, "echo ok"); got != "ok\n" {
				t.Fatalf("after %s: %q", code, got)
			}
		}
	})
}

// TestNounsetWithoutPWD: under set -u, a command that unset PWD must not
// make corral's own function fail (an unbound variable ends a
// non-interactive shell); the recorded cwd is still the shell's.
func TestNounsetWithoutPWD(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		dir, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		out, errs, r, err := runBounded(t, s, "cd "+dir+"; set -u; unset PWD; echo x")
		if err != nil || out != "x\n" {
			t.Fatalf("%q %q %+v %v", out, errs, r, err)
		}
		if st := s.State(); st.Cwd != dir || st.Resets != 0 {
			t.Fatalf("state %+v, want cwd %q and no reset", st, dir)
		}
	})
}

// TestSinkCutsTheTracedCall: on stderr, the trace of corral's call (and
// all up to the marker) is not the command's output, however the reads
// split it; a default PS4 before it goes too, other output stays.
func TestSinkCutsTheTracedCall(t *testing.T) {
	const nonce = "nonce12chars"
	for _, c := range []struct{ in, want string }{
		{"err\n++ echo x\n+ _cabcde " + nonce + " 0\n++ builtin printf x\n\x1fcorral:" + nonce + " 0\x1f", "err\n++ echo x\n"},
		{"partial+ _cabcde " + nonce + " 0\n\x1fcorral:" + nonce + " 0\x1f", "partial+ "},
		{"no trace\n\x1fcorral:" + nonce + " 3\x1f", "no trace\n"},
		{"_cabcde other 0\n_c\x1fcorral:" + nonce + " 3\x1f", "_cabcde other 0\n_c"},
	} {
		for step := 1; step <= len(c.in); step++ {
			var got strings.Builder
			k := newSink(nonce, time.Now(), Options{Stderr: &got}, false)
			k.trace = []byte("_cabcde " + nonce + " ")
			for off := 0; off < len(c.in); off += step {
				k.feed(1, []byte(c.in[off:min(off+step, len(c.in))]), time.Now())
			}
			select {
			case <-k.found[1]:
			default:
				t.Fatalf("%q in steps of %d: marker not found", c.in, step)
			}
			k.close()
			// Split reads may cut a PS4-like end of a line that began
			// in an earlier read.
			if got.String() != c.want && !(step > 1 && c.want == "partial+ " && got.String() == "partial") {
				t.Fatalf("%q in steps of %d: %q, want %q", c.in, step, got.String(), c.want)
			}
		}
	}
}

// FuzzSinkStderr: stderr that holds neither corral's traced call nor its
// marker comes out exactly as written, however the reads split it (what
// the sink holds back for a possible trace or PS4 is never lost).
func FuzzSinkStderr(f *testing.F) {
	f.Add([]byte("++ echo x\n+ "), []byte{1, 2, 3})
	f.Add([]byte("_cabcde nonce12chaX"), []byte{0})
	f.Add([]byte("\n==== \n+"), []byte{4, 1})
	f.Fuzz(func(t *testing.T, out []byte, cuts []byte) {
		const nonce = "nonce12chars"
		trace := "_cabcde " + nonce + " "
		if bytes.Contains(out, []byte(trace)) || bytes.Contains(out, []byte("\x1fcorral:"+nonce+" ")) {
			t.Skip("the output contains the trace or the marker")
		}
		var got bytes.Buffer
		k := newSink(nonce, time.Now(), Options{Stderr: &got}, false)
		k.trace = []byte(trace)
		data := append(append([]byte(nil), out...), "\x1fcorral:"+nonce+" 5\x1f"...)
		for len(data) > 0 {
			n := len(data)
			if len(cuts) > 0 {
				n = min(int(cuts[0])%17+1, len(data))
				cuts = cuts[1:]
			}
			k.feed(1, data[:n], time.Now())
			data = data[n:]
		}
		select {
		case <-k.found[1]:
		default:
			t.Fatalf("marker not found after %q", out)
		}
		k.close()
		if !bytes.Equal(got.Bytes(), out) {
			t.Fatalf("stderr %q, want %q", got.Bytes(), out)
		}
	})
}

// TestProtocolFunctionsCannotBeRedefined: a bash command can list
// corral's protocol functions (declare -F shows them, the one that gives
// each command its FIFOs among them) and try to redefine or unset every
// one; they are read-only, so every later command still gets its own
// stdout and stderr, apart, and its own status, and nothing lands in a
// file of the command's choosing. (An alias of a protocol function's name,
// with expand_aliases on, does capture the end of the command: the session
// is said to have stopped answering and restarts. Not fixed yet: the
// calls need a quoted name, and the sink's cut of their echo under set -v
// must then skip the quote.)
func TestProtocolFunctionsCannotBeRedefined(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("bash only: dash lets a command list no functions, and the protocol's names are random")
		}
		bait := filepath.Join(t.TempDir(), "bait")
		attack := `n=0; for f in $(declare -F | while read -r _ _ n; do echo "$n"; done); do n=$((n+1)); ` +
			`eval "$f() { echo captured >>` + bait + `; }" 2>/dev/null; unset -f "$f" 2>/dev/null; done; echo "tried $n"`
		// F, Fe, Fs and Fo at least.
		if out, errs, r, err := runBounded(t, s, attack); err != nil || !strings.HasPrefix(out, "tried ") || out < "tried 4\n" || len(out) != len("tried 4\n") {
			t.Fatalf("the attack: %q %q %+v %v", out, errs, r, err)
		}
		for i := 0; i < 3; i++ {
			out, errs, r, err := runBounded(t, s, "echo out; echo err >&2; (exit 3)")
			if out != "out\n" || errs != "err\n" || r.ExitCode != 3 || r.Outcome != "exited" {
				t.Fatalf("after the attack, command %d: %q %q %+v %v", i, out, errs, r, err)
			}
		}
		if b, _ := os.ReadFile(bait); len(b) > 0 {
			t.Fatalf("a redefined protocol function ran: %q", b)
		}
		if s.State().Resets != 0 {
			t.Fatalf("the session was reset: %+v", s.State())
		}
	})
}
