package corral_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// Resource limits and accounting through the job object. These run under
// Wine here (../shared/wine/go-test.sh), and Wine is not Windows: its job
// objects take the memory and process limits without enforcing them, do
// not implement the CPU rate cap, and count neither CPU time nor memory,
// though they do deliver the completion-port messages pids_peak is counted
// from. corral therefore refuses every limit under Wine, and reports the
// CPU and memory numbers absent with a reason naming Wine. Each test
// checks, under Wine, exactly that, and on Windows the real thing: a pass
// under Wine is evidence for the plumbing and the honesty, not proof of
// the enforcement, which only a Windows run shows.

// onWine reports whether this test binary runs under Wine (its ntdll
// exports wine_get_version; Windows's does not).
func onWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}

// limited is helper with this test's process marker.
func limited(kv, name string, args ...string) (*corral.Cmd, *bytes.Buffer) {
	c := helper(name, args...)
	c.Env = append(c.Env, kv)
	var out bytes.Buffer
	c.Stdout = &out
	c.Stderr = &out
	return c, &out
}

// refusedOnWine checks the refusal every limit gets under Wine: nothing
// ran, an isolation error that says why.
func refusedOnWine(t *testing.T, r *corral.Result, err error, want string) {
	t.Helper()
	if r.Outcome != corral.OutcomeStartFailed || !errors.Is(err, corral.ErrIsolation) || !strings.Contains(r.Error, want) {
		t.Fatalf("under Wine want start_failed, ErrIsolation, %q; got %+v, %v", want, r, err)
	}
	t.Logf("under Wine, refused as it must be: %s (enforcement is checked on Windows only)", r.Error)
}

func TestJobMemoryLimit(t *testing.T) {
	kv := testproc.Guard(t, 60*time.Second)
	// Under the limit: the commit succeeds.
	c, out := limited(kv, "commit", "16")
	c.MemoryMax = 64 << 20
	r, err := c.Run(context.Background())
	if onWine() {
		refusedOnWine(t, r, err, "do not enforce")
		return
	}
	if err != nil || strings.TrimSpace(out.String()) != "committed" {
		t.Fatalf("16 MiB under a 64 MiB limit: %q, %+v, %v", out.String(), r, err)
	}
	if strings.Contains(r.Accounting, "limit was reached") {
		t.Errorf("limit reported reached: %q", r.Accounting)
	}
	if r.MemoryPeakBytes == nil || *r.MemoryPeakBytes < 16<<20 || *r.MemoryPeakBytes > 64<<20 {
		t.Errorf("memory peak %v for a 16 MiB commit under 64 MiB (%q)", r.MemoryPeakBytes, r.Accounting)
	}

	// Past it: the allocation fails, nothing is killed, the exit is the
	// program's own, and the result says the limit was reached.
	c, out = limited(kv, "commit", "256")
	c.MemoryMax = 64 << 20
	r, err = c.Run(context.Background())
	if err != nil || !strings.HasPrefix(out.String(), "refused: ") {
		t.Fatalf("256 MiB under a 64 MiB limit: %q, %+v, %v", out.String(), r, err)
	}
	if r.Outcome != corral.OutcomeExited || r.ExitCode != 0 || r.OOMKills != nil {
		t.Errorf("want the program's own exit and no OOM kill: %+v", r)
	}
	if !strings.Contains(r.Accounting, "the job memory limit was reached") {
		t.Errorf("accounting does not say the limit was reached: %q", r.Accounting)
	}
	if r.MemoryPeakBytes == nil || *r.MemoryPeakBytes > 64<<20 {
		t.Errorf("memory peak %v past a 64 MiB job limit", r.MemoryPeakBytes)
	}

	// A Go program whose heap cannot grow: the runtime itself gives up
	// ("fatal error: out of memory", exit 2). That exit is reported as it
	// is, not as an OOM kill no one made.
	c, out = limited(kv, "alloc", "256")
	c.MemoryMax = 64 << 20
	r, _ = c.Run(context.Background())
	if r.Outcome != corral.OutcomeExited || r.ExitCode != 2 || !strings.Contains(out.String(), "out of memory") ||
		!strings.Contains(r.Accounting, "the job memory limit was reached") {
		t.Errorf("Go heap past the limit: want exit 2, out of memory, the limit reached; got %q, %+v", out.String(), r)
	}
}

func TestJobProcessLimit(t *testing.T) {
	kv := testproc.Guard(t, 60*time.Second)
	// The root and two children make three; the third child is refused.
	c, out := limited(kv, "spawnall", "5", "1")
	c.PidsMax = 3
	r, err := c.Run(context.Background())
	if onWine() {
		refusedOnWine(t, r, err, "do not enforce")
		return
	}
	if err != nil || !strings.HasPrefix(out.String(), "started 2\nrefused: ") {
		t.Fatalf("5 children under a limit of 3 processes: %q, %+v, %v", out.String(), r, err)
	}
	if r.PidsPeak == nil || *r.PidsPeak != 3 {
		t.Errorf("pids peak %v, want 3 (%q)", r.PidsPeak, r.Accounting)
	}
	if !strings.Contains(r.Accounting, "active process limit refused") {
		t.Errorf("accounting does not say the limit refused a process: %q", r.Accounting)
	}
}

func TestJobCPULimit(t *testing.T) {
	kv := testproc.Guard(t, 60*time.Second)
	c, _ := limited(kv, "spin", "2000")
	c.CPUs = 0.5
	r, err := c.Run(context.Background())
	if onWine() {
		refusedOnWine(t, r, err, "do not enforce")
		return
	}
	if err != nil || r.CPUUserMs == nil || r.CPUSystemMs == nil {
		t.Fatalf("%+v, %v", r, err)
	}
	// A busy loop capped at half a CPU gets no more than half its wall
	// time (with a generous margin for the scheduler's granularity).
	cpu := *r.CPUUserMs + *r.CPUSystemMs
	wall := float64(r.Duration.Milliseconds())
	if cpu > 0.75*wall+100 {
		t.Errorf("%.0f ms of CPU in %.0f ms under a cap of 0.5 CPUs", cpu, wall)
	}
	t.Logf("%.0f ms of CPU in %.0f ms under a cap of 0.5 CPUs", cpu, wall)
}

func TestJobMemoryHighRefused(t *testing.T) {
	kv := testproc.Guard(t, 60*time.Second)
	file := filepath.Join(testproc.TempDir(t), "ran")
	c, _ := limited(kv, "touch", file)
	c.MemoryHigh = 64 << 20
	r, err := c.Run(context.Background())
	if r.Outcome != corral.OutcomeStartFailed || !errors.Is(err, corral.ErrIsolation) ||
		!strings.Contains(r.Error, "memory.high") || !strings.Contains(r.Error, "no Windows equivalent") {
		t.Fatalf("want a refusal naming memory.high: %+v, %v", r, err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("the command ran although its limit was refused")
	}
}

func TestJobAccounting(t *testing.T) {
	kv := testproc.Guard(t, 60*time.Second)
	// absentWhy: every Windows run lacks these two, with the reason.
	absentWhy := func(r *corral.Result) {
		t.Helper()
		if r.CPUThrottledMs != nil || r.OOMKills != nil ||
			!strings.Contains(r.Accounting, "cpu_throttled_ms: ") || !strings.Contains(r.Accounting, "oom_kills: Windows has no OOM killer") {
			t.Errorf("throttled time and OOM kills must be absent with their reasons: %+v", r)
		}
	}

	// A busy loop: its CPU time, and the memory it committed.
	c, _ := limited(kv, "spin", "500")
	r, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	absentWhy(r)
	if r.PidsPeak == nil || *r.PidsPeak != 1 {
		t.Errorf("pids peak %v for one process (%q)", r.PidsPeak, r.Accounting)
	}
	if onWine() {
		if r.CPUUserMs != nil || r.CPUSystemMs != nil || r.MemoryPeakBytes != nil ||
			!strings.Contains(r.Accounting, "Wine's job objects do not count CPU time") ||
			!strings.Contains(r.Accounting, "Wine does not track it") {
			t.Errorf("under Wine, CPU and memory must be absent with the reason, never zeros: %+v", r)
		}
	} else {
		if r.CPUUserMs == nil || r.CPUSystemMs == nil || r.MemoryPeakBytes == nil {
			t.Fatalf("accounting absent: %q", r.Accounting)
		}
		cpu := *r.CPUUserMs + *r.CPUSystemMs
		wall := float64(r.Duration.Milliseconds())
		if cpu < 250 || cpu > wall*float64(runtime.NumCPU())+50 {
			t.Errorf("%.0f ms of CPU for a 500 ms busy loop (%.0f ms wall)", cpu, wall)
		}
		if *r.MemoryPeakBytes < 1<<20 {
			t.Errorf("memory peak %d bytes for a Go program", *r.MemoryPeakBytes)
		}
	}

	// Three children at once: four processes at the peak, whether they
	// exit by themselves (the root outlives them) or are killed when the
	// root exits (no exit of theirs is reported then).
	for _, args := range [][]string{{"3", "1", "2"}, {"3", "30", "1"}} {
		c, out := limited(kv, "spawn", args...)
		r, err := c.Run(context.Background())
		if err != nil || len(pidsIn(t, out.String())) != 3 {
			t.Fatalf("spawn %v: %q, %+v, %v", args, out.String(), r, err)
		}
		absentWhy(r)
		if r.PidsPeak == nil || *r.PidsPeak != 4 {
			t.Errorf("spawn %v: pids peak %v, want 4 (%q)", args, r.PidsPeak, r.Accounting)
		}
		noneAlive(t, pidsIn(t, out.String()))
	}
}
