package testproc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ForeignGroup starts two processes outside corral (sleep 60, with the
// marker mark and no tree marker): the leader of a new process group and
// a second member of that group, for tests that forge a record naming
// processes corral never started. sleep keeps the default action of every
// signal corral sends, so any of them ends or stops it. Each is past its
// exec when ForeignGroup returns (an environment read mid-exec is empty).
// The test's cleanup kills both, by pid.
func ForeignGroup(t testing.TB, mark string) (leader, member int) {
	t.Helper()
	start := func(pgid int) int {
		c := exec.Command("sleep", "60")
		c.Env = Env(mark)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Process.Kill()
			c.Wait()
		})
		pid := strconv.Itoa(c.Process.Pid)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			b, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			env, _ := os.ReadFile("/proc/" + pid + "/environ")
			if strings.HasPrefix(string(b), "sleep\x00") && len(env) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %s does not run sleep: %q", pid, b)
			}
		}
		return c.Process.Pid
	}
	leader = start(0)
	member = start(leader)
	return leader, member
}
