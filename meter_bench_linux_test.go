package corral_test

import (
	"context"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// BenchmarkMeterCommand: what measuring one command of a long-lived tree
// costs (Measure, then Account: a session pays it on every command). The
// issue's bound for reading accounting is 100 us per run on the host.
func BenchmarkMeterCommand(b *testing.B) {
	mark := testproc.Guard(b, 60*time.Second)
	c := helperTree(mark, "")
	c.Path, c.Args = "/bin/sleep", []string{"sleep", "60"}
	tree, err := c.Start(context.Background())
	if err != nil {
		b.Skip("no cgroup tree here:", err)
	}
	defer func() { tree.Stop(-1); tree.Wait() }()
	var res corral.Result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tree.Measure().Account(&res)
	}
	b.StopTimer()
	if res.CPUUserMs == nil {
		b.Fatalf("nothing measured: %+v", res)
	}
}
