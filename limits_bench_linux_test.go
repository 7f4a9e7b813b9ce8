package corral_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/corral-dev/corral"
)

// BenchmarkLimitsRunTrue: Run of true in a cgroup with a memory, cpu and
// pids limit against the same Run without them, alternately in one loop
// (goal: ratio <= 1.1). It needs the controllers: in ../shared/vm,
//
//	run.sh -- corral.test -test.run XXX -test.bench LimitsRunTrue
func BenchmarkLimitsRunTrue(b *testing.B) {
	_, avail, err := availableControllers()
	if err != nil || !avail["memory"] || !avail["cpu"] || !avail["pids"] {
		b.Skip("the memory, cpu and pids controllers are not all available here (run in ../shared/vm)")
	}
	path, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	run := func(limit bool) {
		c := corral.Command(path)
		c.Isolation = corral.IsolationCgroup
		if limit {
			c.MemoryMax, c.CPUs, c.PidsMax = 256<<20, 1, 100
		}
		r, err := c.Run(context.Background())
		if err != nil || limit && r.MemoryPeakBytes == nil {
			b.Fatal(r, err)
		}
	}
	var p pair
	for i := 0; i < b.N; i++ {
		p.base += timed(func() { run(false) })
		p.subj += timed(func() { run(true) })
	}
	p.report(b, "x-unlimited")
}
