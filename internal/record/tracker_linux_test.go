package record

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/testproc"
)

// A Tracker of a pgroup tree adds to the record the processes its owner
// holds only by adoption, while the tree runs, and stops looking at Done.
// This test binary starts no children outside corral, as the corral command
// does, so it may declare OwnAllChildren.
func TestTrackerRecordsAdoptedEscapees(t *testing.T) {
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Skipf("setsid not found: %v", err)
	}
	env, _ := exec.LookPath("env")
	sh, _ := exec.LookPath("sh")
	sleep, _ := exec.LookPath("sleep")
	contain.OwnAllChildren()
	mark := testproc.Guard(t, 60*time.Second)
	s := Store{Dir: testproc.TempDir(t)}
	pidf := filepath.Join(s.Dir, "escapee.pid")
	tr := s.Track([]string{"test"})
	cmd := corral.Command(sh, "-c", fmt.Sprintf(
		"%s -f %s -i %s %s -c 'echo $$ > %s; exec %s 600' </dev/null >/dev/null 2>&1; exec %s 600",
		setsid, env, mark, sh, pidf, sleep, sleep))
	cmd.Env = testproc.Env(mark)
	cmd.Isolation = corral.IsolationPgroup
	cmd.OnStart = tr.OnStart
	cmd.Grace = -1
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *corral.Result, 1)
	go func() {
		res, _ := cmd.Run(ctx)
		done <- res
	}()
	pid := testproc.PidFile(t, pidf, 10*time.Second)
	st, err := proc.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	want := corral.Proc{Pid: pid, StartTime: st.StartTime}
	recorded := false
	for deadline := time.Now().Add(5 * time.Second); !recorded && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		recs, _ := s.List()
		for _, r := range recs {
			for _, p := range r.Adopted {
				recorded = recorded || p == want
			}
		}
	}
	cancel()
	if err := tr.Done(<-done); err != nil {
		t.Fatalf("Done: %v", err)
	}
	if !recorded {
		t.Fatalf("escapee %+v never recorded", want)
	}
	if testproc.Alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("escapee %d outlived the cancelled run", pid)
	}
	if recs, errs := s.List(); len(recs) != 0 || len(errs) != 0 {
		t.Fatalf("record left after Done: %+v %v", recs, errs)
	}
}
