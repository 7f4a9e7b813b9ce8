package corral_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestRunLeavesNoGoroutine: runs whose root exits with descendants alive,
// under a context that never ends, leave no goroutine behind (each used to
// leave the one that watched for an escalation: 20 runs, 20 goroutines).
func TestRunLeavesNoGoroutine(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		run := func() {
			c := sh(iso, mark, "sleep 60 & exit 0")
			if r, err := c.Run(context.Background()); err != nil || r.DescendantsKilled != 1 {
				t.Fatalf("got %+v, %v; want exit 0 with the sleep killed", r, err)
			}
		}
		run() // the first run starts what lives as long as the process
		before := runtime.NumGoroutine()
		for range 20 {
			run()
		}
		deadline := time.Now().Add(testproc.GoroutineSettle)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Fatalf("20 runs: %d goroutines before, %d after:\n%s", before, n, formatStacks(testproc.Goroutines(mark)))
		}
	})
}

func formatStacks(sts []testproc.Stack) string {
	var s string
	for _, st := range sts {
		s += fmt.Sprintf("%d goroutine(s):\n", st.Count)
		for _, f := range st.Frames {
			s += "\t" + f + "\n"
		}
	}
	return s
}
