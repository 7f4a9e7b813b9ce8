//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/testproc"
)

// A pgroup tree whose corral was SIGKILLed leaves its record; once the tree
// has ended, its group id G is only a number. A daemonizing stranger (fork,
// setsid, fork, parent exits) that is given pid G owns a new group G whose
// members all started after the recorded root. corral reap must leave it
// alone: nothing in it carries the tree's marker or descends from a
// verified member of the tree.
func TestReapSparesAStrangerInTheRecordedGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("steering pids through /proc/sys/kernel/ns_last_pid needs root")
	}
	if err := unix.Access("/proc/sys/kernel/ns_last_pid", unix.W_OK); err != nil {
		t.Skipf("ns_last_pid not writable: %v", err)
	}
	mark := testproc.Guard(t, 120*time.Second)
	state := t.TempDir()
	tools := lookTools(t, "env", "setsid", "sh", "sleep")

	// The tree's root comes back to this process when corral dies (init
	// here reaps nothing), so that it can be reaped and its pid freed.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("child subreaper: %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })

	c := cli(t, mark, state, "run", "--isolation", "pgroup", "--", "sh", "-c", "echo up; exec sleep 1")
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	out.Read(make([]byte, 8))
	recs, _ := filepath.Glob(filepath.Join(state, "runs", "*.json"))
	if len(recs) != 1 {
		c.Process.Kill()
		c.Wait()
		t.Fatalf("records %v, want one", recs)
	}
	var rec struct {
		Pid, Pgid int
		StartTime uint64 `json:"start_time"`
	}
	b, _ := os.ReadFile(recs[0])
	if err := json.Unmarshal(b, &rec); err != nil || rec.Pgid <= 1 {
		t.Fatalf("record %s: %v", b, err)
	}
	c.Process.Kill() // corral crashes; the record stays
	c.Wait()
	g := rec.Pgid
	// The root (now our child) ends by itself; reap it so that pid G is
	// free.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(g, &ws, syscall.WNOHANG, nil); pid == g {
			break
		}
		if _, err := proc.ReadStat(g); err == proc.ErrGone {
			break // reaped elsewhere
		}
		if time.Now().After(deadline) {
			t.Fatalf("root %d of the crashed run did not end", g)
		}
		time.Sleep(20 * time.Millisecond)
	}

	leader, member := landStranger(t, mark, tools, g)
	if leader != g {
		t.Skipf("could not give the stranger pid %d: other processes took it (last try got %d)", g, leader)
	}
	st, err := proc.ReadStat(member)
	if err != nil || st.Pgid != g || st.Sid != g || st.StartTime < rec.StartTime {
		t.Fatalf("stranger %d: %+v %v; want group and session %d", member, st, err, g)
	}
	t.Logf("stranger %d in group and session %d, the crashed run's recorded group", member, g)

	rep, _ := cli(t, mark, state, "reap", "--json").Output()
	time.Sleep(100 * time.Millisecond)
	if !testproc.Alive(member) {
		t.Fatalf("reap killed a stranger that took the recorded group id %d:\n%s", g, rep)
	}
	if strings.Contains(string(rep), strconv.Itoa(member)) || !strings.Contains(string(rep), `"gone"`) {
		t.Fatalf("reap claimed the stranger or kept the record:\n%s", rep)
	}
}

// landStranger starts a daemonizing program with no tree marker, steering
// the kernel to give its session leader pid g, and returns the leader's pid
// and the pid of the daemon it leaves behind. It tries a bounded number of
// times: any other process on the machine that forks at the wrong moment
// takes the pid. Every daemon not kept is killed by pid, and the one kept
// is killed at cleanup.
func landStranger(t *testing.T, mark string, tools map[string]string, g int) (leader, member int) {
	t.Helper()
	dir := t.TempDir()
	for try := 0; try < 50; try++ {
		f := filepath.Join(dir, fmt.Sprint("pids-", try))
		// fork (the background job), setsid, fork (sleep), the session
		// leader exits. env -i: nothing of the tree's environment, only
		// the test's own marker, so the guard can find it.
		inner := fmt.Sprintf("%s 600 & echo $$ $! > %s", tools["sleep"], f)
		script := fmt.Sprintf("echo %d > /proc/sys/kernel/ns_last_pid || exit 1; %s -i %s %s %s -c '%s' </dev/null >/dev/null 2>&1 & wait",
			g-1, tools["env"], mark, tools["setsid"], tools["sh"], inner)
		if out, err := exec.Command(tools["sh"], "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("stranger: %v\n%s", err, out)
		}
		b, _ := os.ReadFile(f)
		if _, err := fmt.Sscan(string(b), &leader, &member); err != nil {
			t.Fatalf("stranger pids %q: %v", b, err)
		}
		killer := func() {
			if st, err := proc.ReadStat(member); err == nil && st.Sid == leader && !st.Zombie() {
				syscall.Kill(member, syscall.SIGKILL)
			}
			// It came back to us, the subreaper, when its leader exited.
			var ws syscall.WaitStatus
			syscall.Wait4(member, &ws, syscall.WNOHANG, nil)
			for i := 0; i < 100; i++ {
				if pid, _ := syscall.Wait4(member, &ws, syscall.WNOHANG, nil); pid != 0 {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if leader == g {
			t.Logf("stranger given pid %d after %d tries", g, try+1)
			t.Cleanup(killer)
			return leader, member
		}
		killer()
	}
	return leader, member
}

// What reap may still prove after a crash: a process with neither the
// tree's marker nor the tree's group is the tree's while its parent is a
// member (here the live root), and the root's group stays usable while the
// root holds its pid.
func TestReapFindsUnmarkedMembersThroughTheLiveRoot(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	tools := lookTools(t, "env", "setsid", "sleep")
	env, setsid, sleep := tools["env"], tools["setsid"], tools["sleep"]
	// One child leaves the group and the marker (setsid env -i: its
	// parent, the root, stays), one only the marker (env -i, same group).
	script := fmt.Sprintf("%s %s -i %s %s 600 & %s -i %s %s 601 & echo up; wait", setsid, env, mark, sleep, env, mark, sleep)
	c := cli(t, mark, state, "run", "--isolation", "pgroup", "--", "sh", "-c", script)
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	out.Read(make([]byte, 8))
	// Let both children exec sleep: setsid execs env, which execs sleep,
	// and a process's environment reads empty while it is in an exec, so
	// a count of marked processes taken then can miss it.
	sleeping := func() int {
		n := 0
		for _, pid := range testproc.Survivors(mark) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) == "sleep" {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for (sleeping() < 2 || len(testproc.Survivors(mark)) < 3) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c.Process.Kill()
	c.Wait()
	tree := testproc.Survivors(mark)
	if len(tree) != 3 {
		t.Fatalf("want the root and two unmarked children alive, found %v", tree)
	}
	rep, err := cli(t, mark, state, "reap", "--json").Output()
	if err != nil || !strings.Contains(string(rep), `"killed"`) {
		t.Fatalf("reap: %v\n%s", err, rep)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(testproc.Survivors(mark)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := testproc.Survivors(mark); len(left) > 0 {
		t.Fatalf("reap left %v of %v:\n%s", left, tree, rep)
	}
}
