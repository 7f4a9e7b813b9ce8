package corral_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// isolations runs f once per containment backend available here: the suite
// every backend must pass.
func isolations(t *testing.T, f func(t *testing.T, iso corral.Isolation, mark string)) {
	matrix.Isolations(t, func(t *testing.T, iso string) {
		mark := testproc.Guard(t, 60*time.Second)
		f(t, corral.Isolation(iso), mark)
	})
}

func sh(iso corral.Isolation, mark, script string) *corral.Cmd {
	c := corral.Command("/bin/sh", "-c", script)
	c.Env = testproc.Env(mark)
	c.Isolation = iso
	return c
}

func TestExitAndSignalClassification(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		r, err := sh(iso, mark, "exit 0").Run(context.Background())
		if err != nil || r.Outcome != corral.OutcomeExited || r.ExitCode != 0 {
			t.Fatalf("exit 0: %+v, %v", r, err)
		}
		if r.Isolation != string(iso) || r.Pid == 0 || r.Pgid != r.Pid {
			t.Fatalf("identity not reported: %+v", r)
		}
		r, err = sh(iso, mark, "exit 3").Run(context.Background())
		if r.Outcome != corral.OutcomeExited || r.ExitCode != 3 || !errors.Is(err, corral.ErrExitStatus) {
			t.Fatalf("exit 3: %+v, %v", r, err)
		}
		var re *corral.RunError
		if !errors.As(err, &re) || re.Result != r {
			t.Fatalf("error is not a *RunError carrying the result: %v", err)
		}
		r, err = sh(iso, mark, "kill -USR1 $$; sleep 5").Run(context.Background())
		if r.Outcome != corral.OutcomeSignaled || r.Signal != int(syscall.SIGUSR1) || r.ExitCode != -1 || !errors.Is(err, corral.ErrSignaled) {
			t.Fatalf("self-signal: %+v, %v", r, err)
		}
		if errors.Is(err, corral.ErrExitStatus) || errors.Is(err, corral.ErrTimeout) {
			t.Fatalf("signaled run matched another outcome: %v", err)
		}
	})
}

func TestTimeoutKillsWholeTree(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "sleep 60 & sleep 60 & (sleep 60 &); echo started; wait")
		var out bytes.Buffer
		c.Stdout = &out
		c.Timeout = 300 * time.Millisecond
		start := time.Now()
		r, err := c.Run(context.Background())
		if r.Outcome != corral.OutcomeTimeout || !errors.Is(err, corral.ErrTimeout) {
			t.Fatalf("got %+v, %v", r, err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("timeout took %v", el)
		}
		if out.String() != "started\n" {
			t.Fatalf("output before the cut lost: %q", out.String())
		}
		if left := testproc.Survivors(mark); len(left) > 0 {
			t.Fatalf("survivors right after Run: %v", left)
		}
	})
}

func TestIgnoredTermEscalatesToKill(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		// The ignore is inherited by the shell's children too.
		c := sh(iso, mark, "trap '' TERM; sleep 60 & sleep 60")
		c.Timeout = 100 * time.Millisecond
		c.Grace = 400 * time.Millisecond
		start := time.Now()
		r, _ := c.Run(context.Background())
		el := time.Since(start)
		if r.Outcome != corral.OutcomeTimeout || r.Signal != int(syscall.SIGKILL) {
			t.Fatalf("got %+v", r)
		}
		if el < 500*time.Millisecond || el > 5*time.Second {
			t.Fatalf("took %v; want timeout+grace (500ms) and well under the sleep", el)
		}
	})
}

func TestEscalateSkipsGrace(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "trap '' TERM; sleep 60")
		c.Grace = 30 * time.Second
		esc := make(chan struct{})
		c.Escalate = esc
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		time.AfterFunc(300*time.Millisecond, func() { close(esc) })
		start := time.Now()
		r, err := c.Run(ctx)
		if r.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrCancelled) {
			t.Fatalf("got %+v, %v", r, err)
		}
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("escalation ignored: %v", el)
		}
	})
}

func TestGrandchildHoldingStdout(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		t.Run("kill", func(t *testing.T) {
			c := sh(iso, mark, "sleep 60 & echo hi")
			var out bytes.Buffer
			c.Stdout = &out
			start := time.Now()
			r, err := c.Run(context.Background())
			if err != nil || r.Outcome != corral.OutcomeExited || out.String() != "hi\n" {
				t.Fatalf("got %+v, %v, %q", r, err, out.String())
			}
			if r.DescendantsKilled != 1 || r.DrainCutOff {
				t.Fatalf("descendant not reported as killed: %+v", r)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Fatalf("held stdout delayed Run: %v", el)
			}
		})
		t.Run("keep", func(t *testing.T) {
			c := sh(iso, mark, "sleep 60 & echo $! >&2; echo hi")
			var out, errb bytes.Buffer
			c.Stdout, c.Stderr = &out, &errb
			c.Descendants = corral.KeepDetached
			c.Drain = 300 * time.Millisecond
			r, err := c.Run(context.Background())
			if r.Outcome != corral.OutcomeStdioHeld || !errors.Is(err, corral.ErrStdioHeld) || r.ExitCode != 0 {
				t.Fatalf("got %+v, %v", r, err)
			}
			holder, _ := strconv.Atoi(strings.TrimSpace(errb.String()))
			if len(r.StdioHeldBy) != 1 || r.StdioHeldBy[0] != holder || out.String() != "hi\n" {
				t.Fatalf("holder %d not named: %+v", holder, r)
			}
		})
	})
}

func TestKeepDetachedReleases(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $!")
		var out bytes.Buffer
		c.Stdout = &out
		c.Descendants = corral.KeepDetached
		c.Drain = 200 * time.Millisecond
		r, err := c.Run(context.Background())
		if err != nil || r.Outcome != corral.OutcomeExited {
			t.Fatalf("got %+v, %v", r, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(out.String()))
		if len(r.Detached) != 1 || r.Detached[0] != pid {
			t.Fatalf("detached %v, want [%d]", r.Detached, pid)
		}
		if !testproc.Alive(pid) {
			t.Fatalf("released process %d did not survive", pid)
		}
		syscall.Kill(pid, syscall.SIGKILL) // ours: we just released it
	})
}

func TestSetsidAndDoubleForkCannotEscape(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		for _, script := range []string{
			"setsid sleep 60 & exit 0",
			"(setsid sh -c 'sleep 60 & exit 0' &); exit 0",
			"set -m; sleep 60 & exit 0",
		} {
			c := sh(iso, mark, script)
			r, err := c.Run(context.Background())
			if err != nil || r.DescendantsKilled == 0 {
				t.Fatalf("%s: got %+v, %v", script, r, err)
			}
			if left := testproc.Survivors(mark); len(left) > 0 {
				t.Fatalf("%s: escaped: %v", script, left)
			}
			c = sh(iso, mark, strings.TrimSuffix(script, "exit 0")+"sleep 60")
			c.Timeout = 200 * time.Millisecond
			if r, _ := c.Run(context.Background()); r.Outcome != corral.OutcomeTimeout {
				t.Fatalf("%s under timeout: %+v", script, r)
			}
			if left := testproc.Survivors(mark); len(left) > 0 {
				t.Fatalf("%s under timeout: escaped: %v", script, left)
			}
		}
	})
}

func TestOutputFloodOverLimit(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "yes flood & yes flood >&2")
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		c.MaxOutput = 1 << 20
		r, err := c.Run(context.Background())
		if r.Outcome != corral.OutcomeOutputLimit || !errors.Is(err, corral.ErrOutputLimit) {
			t.Fatalf("got %+v, %v", r, err)
		}
		if int64(out.Len()) != c.MaxOutput || r.StdoutBytes+r.StderrBytes != c.MaxOutput {
			t.Fatalf("delivered %d (counted %d+%d), want exactly %d", out.Len(), r.StdoutBytes, r.StderrBytes, c.MaxOutput)
		}
	})
}

func TestForkStormWhileKilled(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		// Forks as fast as it can, up to 3000 sleepers, each of which
		// forks once more; it is killed in the middle of it.
		c := sh(iso, mark, `i=0; while [ $i -lt 3000 ]; do (sleep 60 & sleep 60) & i=$((i+1)); done; wait`)
		c.Timeout = 400 * time.Millisecond
		c.Grace = -1
		r, err := c.Run(context.Background())
		if r.Outcome != corral.OutcomeTimeout || r.KillFailed {
			t.Fatalf("got %+v, %v", r, err)
		}
		if left := testproc.Survivors(mark); len(left) > 0 {
			t.Fatalf("%d survived the storm", len(left))
		}
	})
}

func TestGracefulStopOfAForkingTree(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		// It ignores SIGTERM and keeps forking, so the rounds of SIGTERM
		// never run dry (the cgroup backend falls back to freezing); the
		// kill after the grace period must still get every process.
		c := sh(iso, mark, `trap '' TERM; i=0; while [ $i -lt 3000 ]; do sleep 60 & i=$((i+1)); done; wait`)
		c.Timeout = 300 * time.Millisecond
		c.Grace = 300 * time.Millisecond
		start := time.Now()
		r, err := c.Run(context.Background())
		if r.Outcome != corral.OutcomeTimeout || r.KillFailed || r.Signal != int(syscall.SIGKILL) {
			t.Fatalf("got %+v, %v", r, err)
		}
		// A bound against a stop that never ends, not a speed goal (the
		// Cancel benchmarks measure that): under pgroup every member of
		// the 3000 is stopped before any is killed, which took 12 s under
		// the race detector on a loaded machine.
		if el := time.Since(start); el > 30*time.Second {
			t.Fatalf("took %v", el)
		}
		if left := testproc.Survivors(mark); len(left) > 0 {
			t.Fatalf("%d survived", len(left))
		}
	})
}

// cancelOnWrite cancels a context on the first write.
type cancelOnWrite struct {
	cancel context.CancelFunc
}

func (w cancelOnWrite) Write(p []byte) (int, error) {
	w.cancel()
	return len(p), nil
}

func TestCancelDuringAFork(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		// The cancel arrives while the shell forks sleep: a child whose
		// fork was in flight when its parent got SIGTERM must get SIGTERM
		// too, not wait out the grace period for SIGKILL.
		for i := 0; i < 40; i++ {
			ctx, cancel := context.WithCancel(context.Background())
			c := sh(iso, mark, "echo up; sleep 60")
			c.Stdout = cancelOnWrite{cancel}
			c.Grace = 20 * time.Second
			start := time.Now()
			r, _ := c.Run(ctx)
			if el := time.Since(start); el > 5*time.Second || r.Outcome != corral.OutcomeCancelled || r.Signal == int(syscall.SIGKILL) {
				t.Fatalf("run %d: %+v after %v: a process waited for the SIGKILL", i, r, el)
			}
		}
	})
}

func TestCancelledBeforeStart(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c := sh(iso, mark, "touch "+dir+"/ran")
		hooked := false
		c.OnStart = func(corral.Identity) error { hooked = true; return nil }
		r, err := c.Run(ctx)
		if r.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrCancelled) || r.Pid != 0 || hooked {
			t.Fatalf("got %+v, %v, hooked=%v", r, err, hooked)
		}
		if _, err := os.Stat(dir + "/ran"); err == nil {
			t.Fatal("the command ran")
		}
	})
}

func TestOnStartHoldsBeforeFirstInstruction(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		c := sh(iso, mark, "touch "+dir+"/ran")
		var seen corral.Identity
		var ranAtHook bool
		var state string
		c.OnStart = func(id corral.Identity) error {
			seen = id
			_, err := os.Stat(dir + "/ran")
			ranAtHook = err == nil
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(id.Pid) + "/stat")
			if i := bytes.LastIndexByte(b, ')'); i > 0 {
				state = string(b[i+2])
			}
			return nil
		}
		r, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ranAtHook || state != "t" {
			t.Fatalf("at hook time the root had run=%v, state %q (want held: t)", ranAtHook, state)
		}
		if seen.Pid != r.Pid || seen.StartTime == 0 || seen.BootID == "" || !strings.HasPrefix(seen.Marker, corral.MarkerEnv+"=") {
			t.Fatalf("identity %+v for result %+v", seen, r)
		}
		if iso == corral.IsolationCgroup && (seen.Cgroup == "" || seen.Cgroup != r.Cgroup) {
			t.Fatalf("cgroup identity %q vs %q", seen.Cgroup, r.Cgroup)
		}
		if _, err := os.Stat(dir + "/ran"); err != nil {
			t.Fatal("the command did not run after the hook")
		}
	})
}

func TestOnStartFailureRunsNothing(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		c := sh(iso, mark, "touch "+dir+"/ran")
		boom := errors.New("disk full")
		var cg string
		c.OnStart = func(id corral.Identity) error { cg = id.Cgroup; return boom }
		r, err := c.Run(context.Background())
		if r.Outcome != corral.OutcomeStartFailed || !errors.Is(err, corral.ErrHook) || !errors.Is(err, boom) || !errors.Is(err, corral.ErrStart) {
			t.Fatalf("got %+v, %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := os.Stat(dir + "/ran"); err == nil {
			t.Fatal("the command ran although its hook failed")
		}
		if iso == corral.IsolationCgroup {
			if cg == "" {
				t.Fatal("the hook was not given the cgroup")
			}
			if _, err := os.Stat(cg); err == nil {
				t.Fatalf("cgroup %s of the refused tree was left behind", cg)
			}
		}
	})
}

func TestStartFailures(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	dir := t.TempDir()
	noexec := filepath.Join(dir, "data")
	os.WriteFile(noexec, []byte("not a program"), 0o644)
	for _, tc := range []struct {
		path string
		want error
	}{
		{"corral-no-such-command", corral.ErrNotFound},
		{filepath.Join(dir, "missing"), corral.ErrNotFound},
		{noexec, corral.ErrNotExec},
		{dir, corral.ErrNotExec},
		{"", corral.ErrBadCommand},
	} {
		c := corral.Command(tc.path)
		c.Env = testproc.Env(mark)
		r, err := c.Run(context.Background())
		if r.Outcome != corral.OutcomeStartFailed || !errors.Is(err, tc.want) || r.Pid != 0 {
			t.Errorf("%q: got %+v, %v; want %v", tc.path, r, err, tc.want)
		}
	}
	c := corral.Command("true")
	c.Isolation = "bogus"
	if r, err := c.Run(context.Background()); !errors.Is(err, corral.ErrIsolation) {
		t.Errorf("bogus isolation: %+v, %v", r, err)
	}
}

func TestFirstOutputTiming(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		for _, script := range []string{"sleep 0.3; echo out", "sleep 0.3; echo err >&2"} {
			c := sh(iso, mark, script+"; sleep 0.2")
			var out, errb bytes.Buffer
			c.Stdout, c.Stderr = &out, &errb
			r, err := c.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if r.FirstOutput < 300*time.Millisecond || r.FirstOutput > r.Duration-150*time.Millisecond {
				t.Fatalf("%s: first output %v of %v", script, r.FirstOutput, r.Duration)
			}
			if r.StdoutBytes+r.StderrBytes != 4 || int64(out.Len()) != r.StdoutBytes || int64(errb.Len()) != r.StderrBytes {
				t.Fatalf("%s: counted %d/%d, got %q/%q", script, r.StdoutBytes, r.StderrBytes, out.String(), errb.String())
			}
		}
		r, _ := sh(iso, mark, "true").Run(context.Background())
		if r.FirstOutput != -1 {
			t.Fatalf("no output, first output %v", r.FirstOutput)
		}
	})
}

// A writer whose ReadFrom would bypass Write: the relay must still count
// and time through its own loop.
type readFromBuffer struct{ bytes.Buffer }

func TestEmbeddedReadFromDoesNotBypassAccounting(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	c := sh(corral.IsolationAuto, mark, "printf abc")
	var w readFromBuffer
	c.Stdout = &w
	r, err := c.Run(context.Background())
	if err != nil || r.StdoutBytes != 3 || r.FirstOutput < 0 || w.String() != "abc" {
		t.Fatalf("got %+v, %v, %q", r, err, w.String())
	}
}

func TestNonZeroExitWithDrainCutOff(t *testing.T) {
	// Only the pgroup backend has a gap to escape through: a process that
	// leaves the group, drops the tree's marker and whose parent dies.
	mark := testproc.Guard(t, 30*time.Second)
	// The root waits until the escapee has dropped the marker (exec'd
	// with an empty environment) before it exits.
	c := sh(corral.IsolationPgroup, mark, `setsid env -i sleep 3 & p=$!; echo $p >&2
while [ "$(tr '\0' '\n' </proc/$p/environ | grep -c CORRAL_TREE)" != 0 ]; do sleep 0.01; done; exit 3`)
	var errb bytes.Buffer
	c.Stderr = &errb
	c.Drain = 300 * time.Millisecond
	start := time.Now()
	r, err := c.Run(context.Background())
	if pid, _ := strconv.Atoi(strings.TrimSpace(errb.String())); pid > 0 {
		defer syscall.Kill(pid, syscall.SIGKILL) // ours: started above
	}
	if r.Outcome != corral.OutcomeExited || r.ExitCode != 3 {
		t.Fatalf("got %+v, %v", r, err)
	}
	if !r.DrainCutOff || !errors.Is(err, corral.ErrDrainCutOff) || !errors.Is(err, corral.ErrExitStatus) {
		t.Fatalf("drain cut-off hidden behind the exit code: %+v, %v", r, err)
	}
	if el := time.Since(start); el > 2500*time.Millisecond {
		t.Fatalf("drain not bounded: %v", el)
	}
}

func TestDescendantIgnoringTermAfterRootExit(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		ready := filepath.Join(t.TempDir(), "ready")
		c := sh(iso, mark, "(trap '' TERM; touch "+ready+"; sleep 60) & while [ ! -e "+ready+" ]; do sleep 0.01; done; exit 0")
		c.Grace = 300 * time.Millisecond
		start := time.Now()
		r, err := c.Run(context.Background())
		el := time.Since(start)
		if err != nil || r.DescendantsKilled < 1 {
			t.Fatalf("got %+v, %v", r, err)
		}
		if el < 300*time.Millisecond || el > 5*time.Second {
			t.Fatalf("took %v, want the grace period and no more", el)
		}
	})
}

func TestStdin(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "cat")
		c.Stdin = strings.NewReader("piped input")
		var out bytes.Buffer
		c.Stdout = &out
		if r, err := c.Run(context.Background()); err != nil || out.String() != "piped input" {
			t.Fatalf("reader stdin: %+v, %v, %q", r, err, out.String())
		}
		c = sh(iso, mark, "cat; echo eof")
		out.Reset()
		c.Stdout = &out
		if _, err := c.Run(context.Background()); err != nil || out.String() != "eof\n" {
			t.Fatalf("nil stdin is not EOF: %v, %q", err, out.String())
		}
		// A command that never reads a large input: not its failure.
		c = sh(iso, mark, "exit 0")
		c.Stdin = bytes.NewReader(make([]byte, 4<<20))
		if r, err := c.Run(context.Background()); err != nil {
			t.Fatalf("unread stdin: %+v, %v", r, err)
		}
	})
}

func TestEnvDirAndMarker(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		c := sh(iso, mark, `echo "$PWD|$FOO|$CORRAL_TREE"`)
		c.Env = append(c.Env, "FOO=bar")
		c.Dir = dir
		var out bytes.Buffer
		c.Stdout = &out
		if _, err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(strings.TrimSpace(out.String()), "|")
		if len(parts) != 3 || parts[0] != dir || parts[1] != "bar" || len(parts[2]) != 32 {
			t.Fatalf("got %q", out.String())
		}
	})
}

// writerFunc is a valid io.Writer whose dynamic type cannot be compared.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestUncomparableWriters(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	var got bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { return got.Write(p) })
	c := sh(corral.IsolationAuto, mark, "echo out; echo err >&2")
	c.Stdout, c.Stderr = w, w
	if _, err := c.Run(context.Background()); err != nil || got.Len() != 8 {
		t.Fatalf("%v, %q", err, got.String())
	}
}
