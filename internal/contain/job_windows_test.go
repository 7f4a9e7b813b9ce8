package contain

import (
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestJobMembersPastTheFirstBuffer: a job with more processes than the
// first buffer holds lists all of them (the list was cut at 1024).
func TestJobMembersPastTheFirstBuffer(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	// cmd.exe, and two children of its own, all alive for a while.
	tree, err := startCmd(t, mark, Limits{}, nil, "start /b ping -n 20 127.0.0.1 & start /b ping -n 20 127.0.0.1 & ping -n 20 127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tree.Kill()
		<-tree.Exited()
		if err := tree.WaitEmpty(KillBound); err != nil {
			t.Error(err)
		}
		tree.Close()
	}()
	job := tree.(*jobTree).job
	var all []int
	for deadline := time.Now().Add(20 * time.Second); len(all) < 4 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if all, err = jobPids(job); err != nil {
			t.Fatal(err)
		}
	}
	if len(all) < 4 {
		t.Fatalf("job has %d processes (%v), want cmd.exe and three pings", len(all), all)
	}
	got, err := jobPidsFrom(job, 1)
	if err != nil || len(got) < len(all) {
		t.Fatalf("with room for one pid first: %v, %v; the job has %v", got, err, all)
	}
}
