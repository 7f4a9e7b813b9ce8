//go:build linux

package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// shells runs f against a session of each shell the suite covers.
func shells(t *testing.T, f func(t *testing.T, s *Session, mark string)) {
	matrix.Shells(t, func(t *testing.T, sh string) {
		mark := testproc.Guard(t, 90*time.Second)
		s := newSession(t, Config{Shell: sh}, mark)
		f(t, s, mark)
	})
}

// shellsAndHeld is shells, and again with held sessions (the daemon's).
func shellsAndHeld(t *testing.T, f func(t *testing.T, s *Session, mark string)) {
	shellConfigs(t, 90*time.Second, Config{}, func(t *testing.T, cfg Config, mark string) {
		f(t, newSession(t, cfg, mark), mark)
	})
}

// shellConfigs runs f as a subtest for each shell this machine has, owned
// and held, with base for that shell (Shell set and, held, a private
// HoldDir) and the marker of a Guard with the given watchdog limit; it
// skips, saying why, a shell that is missing.
func shellConfigs(t *testing.T, limit time.Duration, base Config, f func(t *testing.T, cfg Config, mark string)) {
	for _, sh := range matrix.AllShells {
		for _, held := range []bool{false, true} {
			name := sh
			if held {
				name += "-held"
			}
			t.Run(name, func(t *testing.T) {
				matrix.NeedShell(t, sh)
				mark := testproc.Guard(t, limit)
				cfg := base
				cfg.Shell = sh
				if held {
					cfg.HoldDir = privateDir(t)
				}
				f(t, cfg, mark)
			})
		}
	}
}

// privateDir is a fresh temporary directory that only we may enter, as a
// HoldDir must be.
func privateDir(t *testing.T) string {
	d := t.TempDir()
	os.Chmod(d, 0o700)
	return d
}

func newSession(t *testing.T, cfg Config, mark string) *Session {
	t.Helper()
	cfg.Env = testproc.Env(mark)
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err) // e.g. a cgroup left behind
		}
	})
	return s
}

// run executes code and returns its stdout, stderr and result.
func run(t *testing.T, s *Session, code string, opts ...Options) (string, string, *corral.Result, error) {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	var out, errb bytes.Buffer
	o.Stdout, o.Stderr = &out, &errb
	r, err := s.Exec(context.Background(), code, o)
	return out.String(), errb.String(), r, err
}

func mustRun(t *testing.T, s *Session, code string) string {
	t.Helper()
	out, errs, r, err := run(t, s, code)
	if err != nil {
		t.Fatalf("%q: %+v, %v, stderr %q", code, r, err, errs)
	}
	return out
}

func TestCwdAndEnvPersist(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		dir := t.TempDir()
		mustRun(t, s, "cd "+dir+"; export GREETING='hello world'; PLAIN=1")
		if got := mustRun(t, s, `echo "$PWD|$GREETING|$PLAIN"`); got != dir+"|hello world|1\n" {
			t.Fatalf("state did not persist: %q", got)
		}
		if st := s.State(); st.Cwd != dir || !st.Alive || st.Busy || st.Commands != 2 {
			t.Fatalf("state %+v", st)
		}
	})
}

func TestTrackEnv(t *testing.T) {
	for _, sh := range matrix.AllShells {
		t.Run(sh, func(t *testing.T) {
			matrix.NeedShell(t, sh)
			mark := testproc.Guard(t, 30*time.Second)
			s := newSession(t, Config{Shell: sh, TrackEnv: true}, mark)
			mustRun(t, s, `export ODD="a 'b' \"c\" \$d
line2"; export EMPTY=; unset HOME`)
			env := map[string]string{}
			for _, kv := range s.State().Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if env["ODD"] != "a 'b' \"c\" $d\nline2" || env["EMPTY"] != "" || env[testproc.MarkerName] == "" {
				t.Fatalf("env %q", s.State().Env)
			}
			if _, ok := env["HOME"]; ok {
				t.Fatal("unset variable still reported")
			}
			if _, ok := env["EMPTY"]; !ok {
				t.Fatal("empty variable not reported")
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		dir := t.TempDir()
		mustRun(t, s, "cd "+dir+"; export SNAP='x y'")
		if st := s.State(); hasEnv(st.Env, "SNAP=x y") {
			t.Fatal("environment tracked without TrackEnv")
		}
		st, err := s.Snapshot(context.Background())
		if err != nil || st.Cwd != dir || !hasEnv(st.Env, "SNAP=x y") || st.Commands != 1 {
			t.Fatalf("snapshot %+v, %v", st, err)
		}
		if !hasEnv(s.State().Env, "SNAP=x y") {
			t.Fatal("State does not have the snapshot")
		}
	})
}

func hasEnv(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}

func TestExactCompletion(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		var nonces []string
		testHookNonce = func(n string) { nonces = append(nonces, n) }
		defer func() { testHookNonce = nil }()
		mustRun(t, s, "true")
		prev := nonces[len(nonces)-1]
		// The previous command's whole markers in the output are just
		// output.
		fakeOut := "\x1fcorral:" + prev + " 0 /tmp\x00"
		fakeErr := "\x1fcorral:" + prev + " 0\x1f"
		out, errs, r, err := run(t, s, `printf '\037corral:`+prev+` 0 /tmp\000'; printf '\037corral:`+prev+` 0\037' >&2; (exit 4)`)
		if out != fakeOut || errs != fakeErr || r.ExitCode != 4 || err == nil {
			t.Fatalf("output with the previous nonce: %q %q %+v", out, errs, r)
		}
		for code, want := range map[string]string{
			"printf 'no newline'":               "no newline",
			"true":                              "",
			"printf '\\000\\001\\377\\n\\037x'": "\x00\x01\xff\n\x1fx",
			"printf '%s' \"$(printf 'a%.0s' $(seq 1 70000))\" | wc -c": "70000\n",
			"cat <<'EOF'\n'quoted' \"x\" $y\nEOF":                      "'quoted' \"x\" $y\n",
			"echo one # trailing comment":                              "one\n",
			"echo 'it''s' \"two\nlines\"":                              "its two\nlines\n",
		} {
			if got := mustRun(t, s, code); got != want {
				t.Errorf("%q: got %q, want %q", code, got, want)
			}
		}
		// An unterminated heredoc ends with its command, not the session.
		out, _, r, _ = run(t, s, "cat <<EOF\nno end")
		if r.Outcome != corral.OutcomeExited || !strings.Contains(out, "no end") {
			t.Fatalf("unterminated heredoc: %+v %q", r, out)
		}
		big := strings.Repeat("x", 1<<20)
		if got := mustRun(t, s, "head -c 1048576 /dev/zero | tr '\\0' x"); got != big {
			t.Fatalf("1 MiB output: got %d bytes", len(got))
		}
	})
}

func TestStdin(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		out, _, _, err := run(t, s, "cat; echo done", Options{Stdin: strings.NewReader("fed\n")})
		if err != nil || out != "fed\ndone\n" {
			t.Fatalf("stdin: %q %v", out, err)
		}
		if got := mustRun(t, s, "cat; echo eof"); got != "eof\n" {
			t.Fatalf("nil stdin is not EOF: %q", got)
		}
		// Nothing of the control channel is reachable: descriptor 3 is
		// closed, and reading stdin never sees a command.
		if got := mustRun(t, s, "cat <&3 2>/dev/null; echo rc=$?; read -r x; echo \"read=$x\""); got != "rc=2\nread=\n" && got != "rc=1\nread=\n" {
			t.Fatalf("control channel reachable: %q", got)
		}
		if got := mustRun(t, s, "echo next"); got != "next\n" {
			t.Fatalf("after probing: %q", got)
		}
		// A large input the command never reads is not its failure.
		if _, _, r, err := run(t, s, "true", Options{Stdin: bytes.NewReader(make([]byte, 4<<20))}); err != nil {
			t.Fatalf("unread stdin: %+v %v", r, err)
		}
	})
}

func TestShellEndingCommands(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		dir := t.TempDir()
		for _, tc := range []struct {
			code    string
			outcome corral.Outcome
			code_   int
		}{
			{"cd " + dir + "; exit 7", corral.OutcomeExited, 7},
			{"cd " + dir + "; set -e; false; echo not reached", corral.OutcomeExited, 1},
			{"cd " + dir + "; exec sh -c 'exit 5'", corral.OutcomeExited, 5},
			{"cd " + dir + "; kill -KILL $$", corral.OutcomeSignaled, 0},
		} {
			resets := s.State().Resets
			_, _, r, err := run(t, s, tc.code)
			if r.Outcome != tc.outcome || (tc.outcome == corral.OutcomeExited && r.ExitCode != tc.code_) || err == nil {
				t.Fatalf("%q: %+v, %v", tc.code, r, err)
			}
			if tc.outcome == corral.OutcomeSignaled && r.Signal != int(syscall.SIGKILL) {
				t.Fatalf("%q: signal %d", tc.code, r.Signal)
			}
			// The next command gets a fresh shell in the initial directory.
			if got := mustRun(t, s, "pwd"); got == dir+"\n" {
				t.Fatalf("%q: the shell was not replaced", tc.code)
			}
			if s.State().Resets != resets+1 {
				t.Fatalf("%q: resets %d -> %d", tc.code, resets, s.State().Resets)
			}
		}
		// Closing the shell's stdout inside a command: never a hang. The
		// shell keeps it closed, as a script would, and exit gives the
		// next command a fresh one.
		_, _, r, _ := run(t, s, "exec >&-; echo gone")
		if r.Outcome != corral.OutcomeExited {
			t.Fatalf("exec >&-: %+v", r)
		}
		if out, errs, r, err := run(t, s, "echo back"); err == nil || out != "" || errs == "" || r.Outcome != corral.OutcomeExited {
			t.Fatalf("after exec >&-: the write should fail as in bash: %q %q %+v %v", out, errs, r, err)
		}
		run(t, s, "exit")
		if got := mustRun(t, s, "echo back"); got != "back\n" {
			t.Fatalf("after exec >&-: %q", got)
		}
		// A syntax error: bash reports it, dash exits; both say so.
		_, errs, r, _ := run(t, s, "if then")
		if r.Outcome != corral.OutcomeExited || r.ExitCode != 2 || !strings.Contains(strings.ToLower(errs), "syntax error") {
			t.Fatalf("syntax error: %+v %q", r, errs)
		}
		if got := mustRun(t, s, "echo ok"); got != "ok\n" {
			t.Fatalf("after syntax error: %q", got)
		}
	})
}

func TestTenThousandCommands(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		mustRun(t, s, "i=0")
		for n := 1; n <= 10000; n++ {
			out, errs, r, err := run(t, s, `i=$((i+1)); echo "$i"`)
			if err != nil || out != strconv.Itoa(n)+"\n" || errs != "" {
				t.Fatalf("command %d: %q %q %+v %v", n, out, errs, r, err)
			}
		}
		if st := s.State(); st.Resets != 0 || st.Commands != 10001 {
			t.Fatalf("drift: %+v", st)
		}
	})
}

func TestConcurrentSubmitters(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					want := fmt.Sprintf("g%d-%d", g, i)
					var out bytes.Buffer
					_, err := s.Exec(context.Background(), "echo "+want+"; sleep 0.001; echo "+want, Options{Stdout: &out})
					if err != nil || out.String() != want+"\n"+want+"\n" {
						errs <- fmt.Errorf("%s: %q %v", want, out.String(), err)
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// waitBusy returns once s reports a command running, so a test acts on a
// command that has started rather than on one a sleep hopes has.
func waitBusy(t *testing.T, s *Session) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !s.State().Busy; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no command became busy within 10s")
		}
	}
}

func TestQueuedCommandHonoursItsContext(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		flag := filepath.Join(t.TempDir(), "ran")
		first := make(chan *corral.Result)
		go func() {
			r, _ := s.Exec(context.Background(), "sleep 1; echo first", Options{})
			first <- r
		}()
		waitBusy(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		r, err := s.Exec(ctx, "touch "+flag, Options{})
		// It gives up at its own deadline, not when the first command ends.
		if r.Outcome != corral.OutcomeTimeout || !errors.Is(err, corral.ErrTimeout) || time.Since(start) > 800*time.Millisecond {
			t.Fatalf("queued command: %+v %v after %v", r, err, time.Since(start))
		}
		if r := <-first; r.Outcome != corral.OutcomeExited || r.ExitCode != 0 {
			t.Fatalf("first command disturbed: %+v", r)
		}
		if _, err := os.Stat(flag); err == nil {
			t.Fatal("the queued command ran after its context ended")
		}
		if s.State().Resets != 0 {
			t.Fatal("a queued timeout reset the session")
		}
	})
}

func TestCancelResetsTheSession(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		dir := t.TempDir()
		mustRun(t, s, "cd "+dir+"; export KEPT=1")
		out, _, r, err := run(t, s, "sleep 60 & setsid sleep 60 & (sleep 60 &); echo started; sleep 60",
			Options{Timeout: 300 * time.Millisecond})
		if r.Outcome != corral.OutcomeTimeout || !errors.Is(err, corral.ErrTimeout) || out != "started\n" {
			t.Fatalf("got %+v, %v, %q", r, err, out)
		}
		if left := testproc.Survivors(mark); len(left) > 0 {
			t.Fatalf("survivors after the reset: %v", left)
		}
		// A fresh shell: the cwd and variables are gone, as documented.
		if got := mustRun(t, s, `echo "$PWD|${KEPT:-unset}"`); got == dir+"|1\n" || !strings.HasSuffix(got, "|unset\n") {
			t.Fatalf("after reset: %q", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		r, err = s.Exec(ctx, "sleep 60", Options{})
		if r.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrCancelled) {
			t.Fatalf("cancel: %+v %v", r, err)
		}
	})
}

func TestStaleCancelDoesNotKillTheNextCommand(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		ctx1, cancel1 := context.WithCancel(context.Background())
		if _, err := s.Exec(ctx1, "true", Options{}); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(200*time.Millisecond, cancel1) // arrives during the next command
		var out bytes.Buffer
		r, err := s.Exec(context.Background(), "sleep 0.5; echo survived", Options{Stdout: &out})
		if err != nil || out.String() != "survived\n" || s.State().Resets != 0 {
			t.Fatalf("stale cancel hit the next command: %+v %v %q", r, err, out.String())
		}
	})
}

func TestRetryOnlyWhenUnusable(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		mustRun(t, s, "true")
		// The shell dies between commands (killed by pid: ours). The next
		// command did not run anywhere, so it is retried on a fresh shell.
		pid := s.State().Pid
		syscall.Kill(pid, syscall.SIGKILL)
		for testproc.Alive(pid) {
			time.Sleep(time.Millisecond)
		}
		if got := mustRun(t, s, "echo retried"); got != "retried\n" {
			t.Fatalf("got %q", got)
		}
		// A command whose shell dies under it may have run: never retried.
		count := filepath.Join(t.TempDir(), "count")
		_, _, r, err := run(t, s, "echo x >> "+count+"; kill -KILL $$")
		if r.Outcome != corral.OutcomeSignaled || err == nil || errors.Is(err, ErrSessionUnusable) {
			t.Fatalf("got %+v %v", r, err)
		}
		if b, _ := os.ReadFile(count); string(b) != "x\n" {
			t.Fatalf("ran %q times", b)
		}
	})
}

func TestStateNeverWaitsForACommand(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		done := make(chan struct{})
		go func() {
			s.Exec(context.Background(), "sleep 1", Options{})
			close(done)
		}()
		waitBusy(t, s)
		start := time.Now()
		st := s.State()
		closed := s.Closed()
		// Far less than the command's 1 s, with room for a loaded machine.
		if el := time.Since(start); el > 500*time.Millisecond || !st.Busy || closed {
			t.Fatalf("state %+v closed %v after %v", st, closed, el)
		}
		<-done
	})
}

func TestOutputLimitResets(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		var out bytes.Buffer
		r, err := s.Exec(context.Background(), "yes", Options{Stdout: &out, MaxOutput: 1 << 20})
		if r.Outcome != corral.OutcomeOutputLimit || !errors.Is(err, corral.ErrOutputLimit) || out.Len() != 1<<20 || r.StdoutBytes != 1<<20 {
			t.Fatalf("got %+v %v, %d bytes", r, err, out.Len())
		}
		if got := mustRun(t, s, "echo fresh"); got != "fresh\n" || s.State().Resets != 1 {
			t.Fatalf("after the limit: %q, %+v", got, s.State())
		}
	})
}

func TestEscapedProcessCannotHoldTheSession(t *testing.T) {
	for _, iso := range matrix.AllIsolations() {
		t.Run(iso, func(t *testing.T) {
			matrix.NeedIsolation(t, iso)
			mark := testproc.Guard(t, 30*time.Second)
			s := newSession(t, Config{Shell: matrix.Shell(t, "bash"), Isolation: corral.Isolation(iso), Drain: 300 * time.Millisecond}, mark)
			start := time.Now()
			if got := mustRun(t, s, "setsid sleep 60 & echo hi"); got != "hi\n" {
				t.Fatalf("got %q", got)
			}
			if got := mustRun(t, s, "echo again"); got != "again\n" {
				t.Fatalf("got %q", got)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("held for %v", el)
			}
			if _, err := s.Exec(context.Background(), "true", Options{}); !errors.Is(err, ErrClosed) {
				t.Fatalf("exec after close: %v", err)
			}
		})
	}
}

func TestCloseEndsARunningCommand(t *testing.T) {
	shells(t, func(t *testing.T, s *Session, mark string) {
		done := make(chan *corral.Result)
		go func() {
			r, err := s.Exec(context.Background(), "sleep 60 & sleep 60", Options{})
			if !errors.Is(err, ErrClosed) || !errors.Is(err, corral.ErrCancelled) {
				t.Errorf("error %v, want ErrClosed and ErrCancelled", err)
			}
			done <- r
		}()
		waitBusy(t, s)
		time.Sleep(100 * time.Millisecond) // the shell has started both sleeps
		s.Close()
		select {
		case r := <-done:
			if r.Outcome != corral.OutcomeCancelled {
				t.Fatalf("a command running at Close: %+v, want cancelled", r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not end the running command")
		}
	})
}

func TestBadInput(t *testing.T) {
	if _, err := New(Config{Shell: "/no/such/shell"}); !errors.Is(err, corral.ErrNotFound) {
		t.Fatalf("missing shell: %v", err)
	}
	mark := testproc.Guard(t, 30*time.Second)
	sh := matrix.Shell(t, "dash", "bash")
	s := newSession(t, Config{Shell: sh}, mark)
	if _, err := s.Exec(context.Background(), "echo a\x00b", Options{}); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("NUL byte: %v", err)
	}
	s2 := newSession(t, Config{Shell: sh, Dir: "/no/such/dir"}, mark)
	if _, err := s2.Exec(context.Background(), "true", Options{}); err == nil {
		t.Fatal("a shell in a missing directory started")
	}
}

func TestRunOnce(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	var out bytes.Buffer
	cfg := Config{Shell: matrix.Shell(t, "bash"), Env: testproc.Env(mark), Dir: t.TempDir()}
	r, err := RunOnce(context.Background(), cfg, "cd /; echo $PWD", Options{Stdout: &out})
	if err != nil || out.String() != "/\n" {
		t.Fatalf("%+v %v %q", r, err, out.String())
	}
	r, err = RunOnce(context.Background(), cfg, "sleep 60 & sleep 60", Options{Timeout: 200 * time.Millisecond})
	if r.Outcome != corral.OutcomeTimeout || !errors.Is(err, corral.ErrTimeout) {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestParseExports(t *testing.T) {
	in := `declare -x A="1"
declare -x B="two words \"quoted\" \$x \\ back"
declare -x NOVALUE
export C='it'"'"'s'
export D=$'tab\there\nnl\x41\101'
typeset -x E=plain
export F="multi
line"
declare -x G=""
`
	got := parseExports(in)
	want := []string{"A=1", `B=two words "quoted" $x \ back`, "C=it's", "D=tab\there\nnlAA", "E=plain", "F=multi\nline", "G="}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}
