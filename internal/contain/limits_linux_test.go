package contain

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchCgroup makes an empty tree cgroup to read, removed after the test.
func benchCgroup(tb testing.TB) string {
	base, err := cgroupBase()
	if err != nil {
		tb.Skipf("no usable cgroup v2: %v", err)
	}
	if err := prepareControllers(base, nil); err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(base, "t-bench-"+newTreeID())
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { removeCgroup(dir) })
	return dir
}

// TestUsageOfAnEmptyCgroup: what the machine measures is present, what
// it cannot is absent with its reason, never a made-up zero.
func TestUsageOfAnEmptyCgroup(t *testing.T) {
	dir := benchCgroup(t)
	u := readUsage(dir)
	if u.CPUUser == nil || u.CPUSystem == nil {
		t.Fatalf("cpu.stat not read: %+v", u)
	}
	on, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control"))
	for c, present := range map[string]bool{"memory": u.MemoryPeak != nil, "pids": u.PidsPeak != nil, "cpu": u.CPUThrottled != nil} {
		enabled := strings.Contains(" "+strings.TrimSpace(string(on))+" ", " "+c+" ")
		if !enabled && (present || !strings.Contains(u.Missing, "cgroup v2 "+c+" controller not delegated")) {
			t.Errorf("%s not enabled: present %v, missing %q", c, present, u.Missing)
		}
		if enabled && !present && c != "pids" { // pids.peak needs a newer kernel
			t.Errorf("%s enabled but not read: %q", c, u.Missing)
		}
	}
}

// BenchmarkUsage is the cost accounting adds to every run (goal: < 100 us).
func BenchmarkUsage(b *testing.B) {
	dir := benchCgroup(b)
	b.ReportAllocs()
	for b.Loop() {
		readUsage(dir)
	}
}

// BenchmarkPrepareControllers is what each cgroup start pays to make sure
// the controllers are on.
func BenchmarkPrepareControllers(b *testing.B) {
	base := filepath.Dir(benchCgroup(b))
	for b.Loop() {
		prepareControllers(base, nil)
	}
}

// BenchmarkLimitsPhases splits what a cgroup tree of true costs with a
// memory, cpu and pids limit against without, alternately in one loop, by
// phase: start (mkdir, the limits, clone3 into the cgroup, exec), the root's
// run until it exited, the wait for the cgroup to empty, reading its usage,
// and Close (reap, rmdir). It is where LimitsRunTrue's ratio comes from; it
// needs the controllers (in ../shared/vm).
func BenchmarkLimitsPhases(b *testing.B) {
	base, err := cgroupBase()
	if err != nil {
		b.Skipf("no usable cgroup v2: %v", err)
	}
	if err := prepareControllers(base, accountedControllers); err != nil {
		b.Skip(err)
	}
	path, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	phases := []string{"start", "run", "empty", "usage", "close"}
	var took [2][5]time.Duration
	one := func(limited int) {
		spec := &Spec{Path: path, Argv: []string{"true"}, Files: []*os.File{null, null, null}}
		if limited == 1 {
			spec.Limits = Limits{MemoryMax: 256 << 20, CPUs: 1, PidsMax: 100}
		}
		t0 := time.Now()
		tree, err := Start(Cgroup, spec)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		<-tree.Exited()
		t2 := time.Now()
		if err := tree.WaitEmpty(KillBound); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if u := tree.(Accounter).Usage(); u.MemoryPeak == nil {
			b.Fatalf("no memory.peak: %+v", u)
		}
		t4 := time.Now()
		if err := tree.Close(); err != nil {
			b.Fatal(err)
		}
		t5 := time.Now()
		for i, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), t5.Sub(t4)} {
			took[limited][i] += d
		}
	}
	for i := 0; i < b.N; i++ {
		one(0)
		one(1)
	}
	var all [2]time.Duration
	for i, p := range phases {
		b.ReportMetric(float64(took[0][i].Microseconds())/float64(b.N), p+"-us/op")
		b.ReportMetric(float64(took[1][i].Microseconds())/float64(b.N), p+"-limited-us/op")
		all[0] += took[0][i]
		all[1] += took[1][i]
	}
	b.ReportMetric(float64(all[1])/float64(all[0]), "x-unlimited")
}

// BenchmarkApplyLimits is the writes of a memory, cpu and pids limit into a
// fresh cgroup, as applyLimits does them (each file opened relative to the
// cgroup's directory, open anyway for clone3) against by their paths from
// the root (what it did), alternately in one loop, each limit alone.
func BenchmarkApplyLimits(b *testing.B) {
	for _, tc := range []struct {
		name string
		l    Limits
	}{
		{"memory", Limits{MemoryMax: 256 << 20}}, {"cpu", Limits{CPUs: 1}}, {"pids", Limits{PidsMax: 100}},
		{"all", Limits{MemoryMax: 256 << 20, CPUs: 1, PidsMax: 100}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			base, err := cgroupBase()
			if err != nil {
				b.Skipf("no usable cgroup v2: %v", err)
			}
			if err := prepareControllers(base, tc.l.controllers()); err != nil {
				b.Skip(err)
			}
			var byPath, atDir time.Duration
			one := func(at bool) time.Duration {
				dir := filepath.Join(base, "t-bench-"+newTreeID())
				if err := os.Mkdir(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				defer removeCgroup(dir)
				fd := unix.AT_FDCWD
				if at {
					if fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
						b.Fatal(err)
					}
					defer unix.Close(fd)
				}
				t0 := time.Now()
				if at {
					err = applyLimits(dir, fd, tc.l)
				} else {
					err = applyLimitsByPath(dir, tc.l)
				}
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			for i := 0; i < b.N; i++ {
				byPath += one(false)
				atDir += one(true)
			}
			b.ReportMetric(float64(byPath.Microseconds())/float64(b.N), "by-path-us/op")
			b.ReportMetric(float64(atDir.Microseconds())/float64(b.N), "at-dir-us/op")
			b.ReportMetric(float64(atDir)/float64(byPath), "x-by-path")
		})
	}
}

// applyLimitsByPath is applyLimits as it was, each file opened by its path:
// BenchmarkApplyLimits's baseline.
func applyLimitsByPath(dir string, l Limits) error {
	for _, w := range []struct {
		set     bool
		file, v string
	}{
		{l.MemoryHigh > 0, "memory.high", strconv.FormatInt(l.MemoryHigh, 10)},
		{l.MemoryMax > 0, "memory.max", strconv.FormatInt(l.MemoryMax, 10)},
		{l.CPUs > 0, "cpu.max", cpuMax(l.CPUs)},
		{l.PidsMax > 0, "pids.max", strconv.Itoa(l.PidsMax)},
	} {
		if w.set {
			if err := writeSmall(filepath.Join(dir, w.file), w.v); err != nil {
				return err
			}
		}
	}
	return nil
}
