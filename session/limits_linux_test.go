//go:build linux

package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// The tests named TestSessionLimit* need cgroup v2 with the memory, cpu
// and pids controllers, which the hybrid layout of our machines lacks:
// there they skip, and TestSessionLimitsRefused checks what such a
// machine says instead. .ci/run runs them in the VM of ../shared/vm.

// cgroupControllers reports which controllers the trees' cgroups can
// have; it skips the test where there is no usable cgroup v2 at all.
func cgroupControllers(t *testing.T) (base string, avail map[string]bool) {
	t.Helper()
	base, err := contain.CgroupBase()
	if err != nil {
		t.Skipf("no usable cgroup v2 here: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		t.Skipf("no usable cgroup v2 here: %v", err)
	}
	avail = map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		avail[c] = true
	}
	return base, avail
}

func needSessionControllers(t *testing.T, names ...string) {
	t.Helper()
	base, avail := cgroupControllers(t)
	for _, n := range names {
		if !avail[n] {
			t.Skipf("the cgroup v2 %s controller is not available in %s (a hybrid layout: run in ../shared/vm, as .ci/run does)", n, base)
		}
	}
}

// cgroupFile reads one file of the cgroup of the session's shell tree.
func cgroupFile(t *testing.T, res *corral.Result, name string) string {
	t.Helper()
	if res.Cgroup == "" {
		t.Fatalf("no cgroup in %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(res.Cgroup, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSessionLimitsRefused: limits a session's isolation cannot enforce
// are refused, clearly and without running anything: under pgroup
// isolation (never faked with rlimits), and under cgroup isolation where
// the controller is not delegated (these machines' hybrid layout). A
// change asked of a live session is refused the same way and leaves the
// session as it was: same shell, same limits, still working.
func TestSessionLimitsRefused(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	t.Run("pgroup", func(t *testing.T) {
		mark := testproc.Guard(t, 60*time.Second)
		s := newSession(t, Config{Shell: "/bin/sh", Isolation: corral.IsolationPgroup, Limits: corral.Limits{PidsMax: 32}}, mark)
		_, _, res, err := run(t, s, "touch "+ran)
		if !errors.Is(err, corral.ErrIsolation) || res.Outcome != corral.OutcomeStartFailed || !strings.Contains(res.Error, "pgroup isolation cannot enforce") {
			t.Fatalf("pgroup with a pids limit: %v %+v", err, res)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatal("the command ran although its limits could not be enforced")
		}
	})
	t.Run("cgroup-without-controller", func(t *testing.T) {
		base, avail := cgroupControllers(t)
		if avail["memory"] {
			t.Skipf("the memory controller is available in %s: nothing to refuse here (the VM tests enforce it)", base)
		}
		mark := testproc.Guard(t, 60*time.Second)
		s := newSession(t, Config{Shell: "/bin/sh", Isolation: corral.IsolationCgroup, Limits: corral.Limits{MemoryMax: 64 << 20}}, mark)
		_, _, res, err := run(t, s, "touch "+ran)
		if !errors.Is(err, corral.ErrIsolation) || res.Outcome != corral.OutcomeStartFailed ||
			!strings.Contains(res.Error, "memory controller is not delegated") || !strings.Contains(res.Error, "Delegate=") {
			t.Fatalf("cgroup without the memory controller: %v %+v", err, res)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatal("the command ran although its limits could not be enforced")
		}

		// A live session without limits: a change is refused, nothing else.
		s = newSession(t, Config{Shell: "/bin/sh", Isolation: corral.IsolationCgroup}, mark)
		if _, _, res, err = run(t, s, "echo up"); err != nil {
			t.Fatal(err, res)
		}
		pid := s.State().Pid
		l, err := s.SetLimits(context.Background(), corral.Limits{MemoryMax: 64 << 20})
		if !errors.Is(err, corral.ErrIsolation) || !l.IsZero() || !s.Limits().IsZero() {
			t.Fatalf("SetLimits without the controller: %v, limits %+v then %+v", err, l, s.Limits())
		}
		out, _, res, err := run(t, s, "echo still")
		if err != nil || out != "still\n" || s.State().Pid != pid {
			t.Fatalf("after the refused change: %q %v %+v (shell %d, was %d)", out, err, res, s.State().Pid, pid)
		}
	})
}

// TestSessionAccountsEachCommand: a session command's CPU times are what
// the session's tree used during that command, not since the shell
// started: a command that burns half a second of user CPU in the shell
// (measured by the shell's own /proc/self/stat, so a loaded machine only
// makes it slower) shows at least 300 ms, and the next, idle command
// shows next to none. Fields that were not measured are absent with a
// reason, and the session's peaks are said to be the session's.
func TestSessionAccountsEachCommand(t *testing.T) {
	matrix.NeedShell(t, "bash")
	mark := testproc.Guard(t, 90*time.Second)
	cgroupControllers(t)
	s := newSession(t, Config{Shell: "bash", Isolation: corral.IsolationCgroup}, mark)
	busy := `read -r -a f < /proc/$$/stat; u0=${f[13]}
while :; do for i in 1 2 3 4 5 6 7 8 9 10; do :; done; read -r -a f < /proc/$$/stat; (( f[13] - u0 >= 50 )) && break; done`
	_, _, res, err := run(t, s, busy)
	if err != nil {
		t.Fatal(err, res)
	}
	if res.CPUUserMs == nil || *res.CPUUserMs < 300 || res.CPUSystemMs == nil {
		t.Fatalf("a command that used 0.5 s of user CPU: cpu_user_ms %v, cpu_system_ms %v (%+v)", ptr(res.CPUUserMs), ptr(res.CPUSystemMs), res)
	}
	_, _, idle, err := run(t, s, ":")
	if err != nil {
		t.Fatal(err, idle)
	}
	if idle.CPUUserMs == nil || *idle.CPUUserMs >= 100 {
		t.Fatalf("the next, idle command: cpu_user_ms %v: not the command's own (the busy one had %v)", ptr(idle.CPUUserMs), *res.CPUUserMs)
	}
	t.Logf("busy: user %.1f ms, system %.1f ms; idle: user %.1f ms; accounting %q", *res.CPUUserMs, *res.CPUSystemMs, *idle.CPUUserMs, idle.Accounting)
	_, avail := cgroupControllers(t)
	if !avail["memory"] {
		if idle.MemoryPeakBytes != nil || idle.OOMKills != nil || !strings.Contains(idle.Accounting, "memory controller not delegated") {
			t.Errorf("without the memory controller: peak %v, oom_kills %v, accounting %q", idle.MemoryPeakBytes, idle.OOMKills, idle.Accounting)
		}
	} else if idle.MemoryPeakBytes == nil || idle.OOMKills == nil || *idle.OOMKills != 0 {
		t.Errorf("with the memory controller: peak %v, oom_kills %v", idle.MemoryPeakBytes, idle.OOMKills)
	}
	if idle.PidsPeak != nil && !strings.Contains(idle.Accounting, "pids_peak") {
		t.Errorf("pids_peak given without saying it is the session's: %q", idle.Accounting)
	}
}

func ptrI(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func ptr(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestSessionLimitPidsForkBomb: a session created with a pids limit of 32
// contains a fork bomb: its tree never has more than 32 processes, the
// command ends by its timeout (which resets the session, killing the
// bomb), and the session's next command works, forking included, in a
// fresh shell that has the limit too.
func TestSessionLimitPidsForkBomb(t *testing.T) {
	needSessionControllers(t, "pids")
	matrix.NeedShell(t, "bash")
	mark := testproc.Guard(t, 120*time.Second)
	s := newSession(t, Config{Shell: "bash", Isolation: corral.IsolationCgroup, Limits: corral.Limits{PidsMax: 32}}, mark)
	_, _, res, err := run(t, s, "echo up")
	if err != nil || cgroupFile(t, res, "pids.max") != "32" {
		t.Fatalf("first command: %v %+v", err, res)
	}
	_, _, res, err = run(t, s, "bomb(){ bomb|bomb& }; bomb; sleep 60", Options{Timeout: 8 * time.Second})
	if res.Outcome != corral.OutcomeTimeout || res.PidsPeak == nil || *res.PidsPeak > 32 {
		t.Fatalf("fork bomb: %v %+v (pids_peak %v)", err, res, res.PidsPeak)
	}
	t.Logf("fork bomb: pids_peak %d, %d processes stopped", *res.PidsPeak, res.ProcessesStopped)
	out, _, res, err := run(t, s, "sh -c 'echo forked'")
	if err != nil || out != "forked\n" || cgroupFile(t, res, "pids.max") != "32" {
		t.Fatalf("after the bomb: %q %v %+v", out, err, res)
	}
}

// TestSessionLimitMemoryOOM: in a session created with a 64 MiB memory
// limit, a command whose process allocates 256 MiB ends oom (exit 137),
// counted in oom_kills, while the session's shell goes on (the OOM killer
// took the largest process, the command's) and says so; a command that
// makes the shell itself outgrow the limit ends oom too, and the session
// restarts with a fresh shell (which has the limit) and says so. The
// command after each works, with no OOM kill of its own.
func TestSessionLimitMemoryOOM(t *testing.T) {
	needSessionControllers(t, "memory")
	matrix.NeedShell(t, "bash")
	mark := testproc.Guard(t, 120*time.Second)
	s := newSession(t, Config{Shell: "bash", Isolation: corral.IsolationCgroup, Limits: corral.Limits{MemoryMax: 64 << 20}}, mark)
	_, _, res, err := run(t, s, "echo up")
	if err != nil || cgroupFile(t, res, "memory.max") != "67108864" {
		t.Fatalf("first command: %v %+v", err, res)
	}
	pid := s.State().Pid
	_, _, res, err = run(t, s, "dd if=/dev/zero of=/dev/null bs=256M count=1 2>/dev/null")
	if res.Outcome != corral.OutcomeOOM || res.ExitCode != 137 || res.OOMKills == nil || *res.OOMKills < 1 ||
		!strings.Contains(res.Error, "shell goes on") || !errors.Is(err, corral.ErrOOM) {
		t.Fatalf("a command allocating 256 MiB: %v %+v (oom_kills %v)", err, res, res.OOMKills)
	}
	if res.MemoryPeakBytes == nil || *res.MemoryPeakBytes > 64<<20 || *res.MemoryPeakBytes < 32<<20 {
		t.Errorf("memory peak %v, want near the 64 MiB limit", res.MemoryPeakBytes)
	}
	t.Logf("256 MiB under 64 MiB: outcome %s, exit %d, oom_kills %d, memory_peak_bytes %v", res.Outcome, res.ExitCode, *res.OOMKills, ptrI(res.MemoryPeakBytes))
	out, _, res, err := run(t, s, "echo after")
	if err != nil || out != "after\n" || s.State().Pid != pid || res.OOMKills == nil || *res.OOMKills != 0 {
		t.Fatalf("after the OOM kill: %q %v %+v (shell %d, was %d)", out, err, res, s.State().Pid, pid)
	}

	_, _, res, err = run(t, s, "s=x; while :; do s=$s$s; done")
	if res.Outcome != corral.OutcomeOOM || res.Signal != 9 || !strings.Contains(res.Error, "session restarts") || !errors.Is(err, corral.ErrOOM) {
		t.Fatalf("the shell outgrowing the limit: %v %+v", err, res)
	}
	t.Logf("the shell outgrowing 64 MiB: outcome %s, signal %d, error %q", res.Outcome, res.Signal, res.Error)
	out, _, res, err = run(t, s, "echo restarted")
	if err != nil || out != "restarted\n" || s.State().Pid == pid || s.State().Resets != 1 || cgroupFile(t, res, "memory.max") != "67108864" {
		t.Fatalf("after the shell's OOM kill: %q %v %+v (state %+v)", out, err, res, s.State())
	}
}

// TestSessionLimitMemoryChangedLive: SetLimits on a live session writes
// the new limit into its shell tree's cgroup at once: with 64 MiB, a
// command allocating 128 MiB ends oom; with the limit removed again
// ("max"), the same command succeeds, in the same shell.
func TestSessionLimitMemoryChangedLive(t *testing.T) {
	needSessionControllers(t, "memory")
	matrix.NeedShell(t, "bash")
	mark := testproc.Guard(t, 120*time.Second)
	s := newSession(t, Config{Shell: "bash", Isolation: corral.IsolationCgroup}, mark)
	alloc := "dd if=/dev/zero of=/dev/null bs=128M count=1 2>/dev/null"
	_, _, res, err := run(t, s, alloc)
	if err != nil || cgroupFile(t, res, "memory.max") != "max" {
		t.Fatalf("unlimited: %v %+v", err, res)
	}
	pid := s.State().Pid
	l, err := s.SetLimits(context.Background(), corral.Limits{MemoryMax: 64 << 20})
	if err != nil || l.MemoryMax != 64<<20 || cgroupFile(t, res, "memory.max") != "67108864" {
		t.Fatalf("SetLimits 64 MiB: %v %+v, memory.max %s", err, l, cgroupFile(t, res, "memory.max"))
	}
	_, _, res, err = run(t, s, alloc)
	if res.Outcome != corral.OutcomeOOM || res.ExitCode != 137 {
		t.Fatalf("128 MiB under a 64 MiB limit set live: %v %+v", err, res)
	}
	if l, err = s.SetLimits(context.Background(), corral.Limits{MemoryMax: -1}); err != nil || !l.IsZero() || cgroupFile(t, res, "memory.max") != "max" {
		t.Fatalf("SetLimits max: %v %+v", err, l)
	}
	_, _, res, err = run(t, s, alloc)
	if err != nil || res.Outcome != corral.OutcomeExited || s.State().Pid != pid {
		t.Fatalf("128 MiB with the limit removed: %v %+v", err, res)
	}
}

// TestSessionLimitPeakPerCommand: where the kernel resets memory.peak per
// reader (Linux 6.12 and later, with the memory controller), a command's
// memory_peak_bytes is its own: after a command that allocated 48 MiB, an
// idle command's peak is far below it, and the accounting no longer calls
// the memory peak the session's. Elsewhere (the VM's 6.1) it skips.
func TestSessionLimitPeakPerCommand(t *testing.T) {
	needSessionControllers(t, "memory")
	matrix.NeedShell(t, "bash")
	mark := testproc.Guard(t, 120*time.Second)
	s := newSession(t, Config{Shell: "bash", Isolation: corral.IsolationCgroup}, mark)
	_, _, res, err := run(t, s, "echo up")
	if err != nil {
		t.Fatal(err, res)
	}
	p, err := contain.ResetPeak(contain.Identity{Isolation: contain.Cgroup, Cgroup: res.Cgroup})
	if err != nil {
		t.Skipf("this kernel keeps one memory.peak per cgroup (%v): a session's peak is the session's", err)
	}
	p.Close()
	_, _, big, err := run(t, s, "dd if=/dev/zero of=/dev/null bs=48M count=1 2>/dev/null")
	if err != nil || big.MemoryPeakBytes == nil || *big.MemoryPeakBytes < 40<<20 {
		t.Fatalf("48 MiB: %v %+v", err, big)
	}
	_, _, idle, err := run(t, s, ":")
	if err != nil || idle.MemoryPeakBytes == nil || *idle.MemoryPeakBytes > 16<<20 || strings.Contains(idle.Accounting, "memory_peak_bytes") {
		t.Fatalf("the idle command after it: %v peak %v, accounting %q", err, ptrI(idle.MemoryPeakBytes), idle.Accounting)
	}
}
