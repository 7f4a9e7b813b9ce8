package contain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
