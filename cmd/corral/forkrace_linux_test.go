//go:build linux

package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/testproc"
)

// A crashed run's tree that keeps forking children which leave the group
// and the marker (setsid env -i) is provably the tree's only through their
// parent. If reap killed the parent while a child was being forked, the
// child would be orphaned to init with nothing left that links it to the
// tree; reap stops every member before it kills any, so none escapes.
func TestReapCatchesChildrenForkedDuringTheKill(t *testing.T) {
	tools := lookTools(t, "env", "setsid", "sleep")
	mark := testproc.Guard(t, 90*time.Second)
	for trial := 0; trial < 3; trial++ {
		state := t.TempDir()
		// At most 400 children, one every few ms: enough to be forking
		// whenever reap looks, bounded so as not to exhaust pids.
		script := fmt.Sprintf("echo up; i=0; while [ $i -lt 400 ]; do %s %s -i %s %s 600 & i=$((i+1)); done; wait",
			tools["setsid"], tools["env"], mark, tools["sleep"])
		c := cli(t, mark, state, "run", "--isolation", "pgroup", "--", "sh", "-c", script)
		out, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		out.Read(make([]byte, 8))
		time.Sleep(30 * time.Millisecond)
		c.Process.Kill() // corral crashes mid-storm
		c.Wait()
		rep, err := cli(t, mark, state, "reap", "--json").Output()
		if err != nil || !strings.Contains(string(rep), `"killed"`) {
			t.Fatalf("trial %d: reap: %v\n%s", trial, err, rep)
		}
		time.Sleep(200 * time.Millisecond)
		if left := testproc.Survivors(mark); len(left) > 0 {
			for _, pid := range left {
				if st, err := proc.ReadStat(pid); err == nil && !st.Zombie() {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			t.Fatalf("trial %d: %d children forked during the reap escaped it: %v", trial, len(left), left)
		}
	}
}
