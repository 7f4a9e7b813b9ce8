package corral_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// helper returns a Cmd that runs a helper of this test binary.
func helper(name string, args ...string) *corral.Cmd {
	c := corral.Command(os.Args[0], args...)
	c.Env = append(os.Environ(), helperEnv+"="+name)
	return c
}

func alive(pid int) bool {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	ev, _ := windows.WaitForSingleObject(h, 0)
	return ev == uint32(windows.WAIT_TIMEOUT)
}

// pidsIn parses the pids a helper printed, one per line.
func pidsIn(t *testing.T, out string) []int {
	var pids []int
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		if p, err := strconv.Atoi(strings.TrimSpace(s.Text())); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// noneAlive fails the test if any of pids is still running (after a short
// grace for the kernel to finish), killing them so nothing leaks.
func noneAlive(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(p) {
			t.Errorf("pid %d survived", p)
			if h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, uint32(p)); err == nil {
				windows.TerminateProcess(h, 1)
				windows.CloseHandle(h)
			}
		}
	}
}

// guarded arms the test's Guard (watchdog, survivors by marker,
// goroutines) and returns helper with the test's marker in the
// environment of the command and of all it starts.
func guarded(t *testing.T) func(name string, args ...string) *corral.Cmd {
	mark := testproc.Guard(t, 60*time.Second)
	return func(name string, args ...string) *corral.Cmd {
		c := helper(name, args...)
		c.Env = append(c.Env, mark)
		return c
	}
}

func TestJobExitCodes(t *testing.T) {
	helper := guarded(t)
	r, err := helper("exit", "0").Run(context.Background())
	if err != nil || r.Outcome != corral.OutcomeExited || r.Isolation != "job" {
		t.Fatalf("exit 0: %+v, %v", r, err)
	}
	r, err = helper("exit", "3").Run(context.Background())
	if r.ExitCode != 3 || !errors.Is(err, corral.ErrExitStatus) {
		t.Fatalf("exit 3: %+v, %v", r, err)
	}
}

func TestJobTimeoutKillsTree(t *testing.T) {
	helper := guarded(t)
	c := helper("spawn", "3", "30")
	var out bytes.Buffer
	c.Stdout = &out
	c.Timeout = 2 * time.Second
	r, err := c.Run(context.Background())
	if r.Outcome != corral.OutcomeTimeout || !errors.Is(err, corral.ErrTimeout) {
		t.Fatalf("got %+v, %v", r, err)
	}
	pids := pidsIn(t, out.String())
	if len(pids) != 3 {
		t.Fatalf("helper printed %q", out.String())
	}
	noneAlive(t, append(pids, r.Pid))
}

func TestJobGrandchildHoldingStdout(t *testing.T) {
	helper := guarded(t)
	// The root exits at once; its child holds stdout for 30s.
	c := helper("spawn", "1", "30", "0")
	var out bytes.Buffer
	c.Stdout = &out
	start := time.Now()
	r, err := c.Run(context.Background())
	if err != nil || r.DescendantsKilled != 1 {
		t.Fatalf("got %+v, %v", r, err)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("took %v", el)
	}
	noneAlive(t, pidsIn(t, out.String()))
}

func TestJobKeepDetached(t *testing.T) {
	helper := guarded(t)
	c := helper("orphan", "30")
	var out bytes.Buffer
	c.Stdout = &out
	c.Descendants = corral.KeepDetached
	c.Drain = 500 * time.Millisecond
	r, _ := c.Run(context.Background())
	pids := pidsIn(t, out.String())
	if len(pids) != 1 {
		t.Fatalf("helper printed %q (%+v)", out.String(), r)
	}
	// The orphan was started with no stdio, so it is released.
	if r.Outcome != corral.OutcomeExited || len(r.Detached) != 1 || !alive(pids[0]) {
		t.Fatalf("released child not alive: %+v", r)
	}
	// Still in the job (a process cannot leave one), the released child
	// counts in the peak, and its being alive does not make the counts
	// disagree.
	if r.PidsPeak == nil || *r.PidsPeak != 2 {
		t.Errorf("pids peak %v with one released child, want 2 (%q)", r.PidsPeak, r.Accounting)
	}
	noneAliveAfterKill(t, pids[0])
}

func noneAliveAfterKill(t *testing.T, pid int) {
	if h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, uint32(pid)); err == nil {
		windows.TerminateProcess(h, 1)
		windows.CloseHandle(h)
	}
	noneAlive(t, []int{pid})
}

func TestJobOnStartHoldsAndFails(t *testing.T) {
	helper := guarded(t)
	dir := testproc.TempDir(t)
	file := filepath.Join(dir, "ran")
	c := helper("touch", file)
	var ranAtHook bool
	c.OnStart = func(id corral.Identity) error {
		time.Sleep(300 * time.Millisecond) // a running child would have touched it by now
		_, err := os.Stat(file)
		ranAtHook = err == nil
		if id.Pid == 0 || !strings.HasPrefix(id.Job, `Local\corral-`) {
			t.Errorf("identity %+v", id)
		}
		return nil
	}
	if _, err := c.Run(context.Background()); err != nil || ranAtHook {
		t.Fatalf("err %v, ran before the hook returned: %v", err, ranAtHook)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal("did not run after the hook")
	}
	os.Remove(file)
	c = helper("touch", file)
	c.OnStart = func(corral.Identity) error { return errors.New("no") }
	r, err := c.Run(context.Background())
	if r.Outcome != corral.OutcomeStartFailed || !errors.Is(err, corral.ErrHook) {
		t.Fatalf("got %+v, %v", r, err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(file); err == nil {
		t.Fatal("ran although the hook failed")
	}
}

func TestJobOutputLimit(t *testing.T) {
	helper := guarded(t)
	c := helper("flood")
	var out bytes.Buffer
	c.Stdout = &out
	c.MaxOutput = 1 << 20
	r, err := c.Run(context.Background())
	if r.Outcome != corral.OutcomeOutputLimit || !errors.Is(err, corral.ErrOutputLimit) || out.Len() != 1<<20 {
		t.Fatalf("got %+v, %v, %d bytes", r, err, out.Len())
	}
}

func TestJobRefusesBreakaway(t *testing.T) {
	helper := guarded(t)
	c := helper("breakaway")
	var out bytes.Buffer
	c.Stdout = &out
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "refused" {
		if pids := pidsIn(t, strings.TrimPrefix(got, "escaped ")); len(pids) == 1 {
			noneAliveAfterKill(t, pids[0])
		}
		t.Fatalf("a child broke away from the job: %q", got)
	}
}

// TestJobOrphanFoundByNameAfterItsOwnerDied: the tree of an owner that
// died without stopping it (what 'corral reap' finds from a record) is
// re-opened by its job's name, its processes listed and killed.
func TestJobOrphanFoundByNameAfterItsOwnerDied(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	owner := helperCmd("owner", "30")
	owner.Env = append(owner.Env, mark)
	var out bytes.Buffer
	owner.Stdout = &out
	if err := owner.Run(); err != nil {
		t.Fatalf("owner: %v (%q)", err, out.String())
	}
	var id corral.Identity
	if err := json.Unmarshal(out.Bytes(), &id); err != nil || !strings.HasPrefix(id.Job, `Local\corral-`) {
		t.Fatalf("owner printed %q (%v)", out.String(), err)
	}
	if !alive(id.Pid) {
		t.Fatalf("the root %d died with its owner", id.Pid)
	}
	o, err := corral.FindOrphan(id)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); len(pids) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if pids, err = o.Members(); err != nil {
			t.Fatal(err)
		}
	}
	if len(pids) != 2 || !slices.Contains(pids, id.Pid) {
		t.Fatalf("orphan's members %v, want the root %d and its child", pids, id.Pid)
	}
	if err := o.Kill(); err != nil {
		t.Fatal(err)
	}
	noneAlive(t, pids)
	// Found again (a second reap), it has nothing left to kill: gone, or
	// a job with no members (a job object outlives its processes while
	// anything holds it).
	if o, err := corral.FindOrphan(id); err == nil {
		if left, err := o.Members(); err != nil || len(left) > 0 {
			t.Errorf("found again after it was killed: members %v, %v", left, err)
		}
		if err := o.Kill(); err != nil {
			t.Error(err)
		}
	} else if !errors.Is(err, corral.ErrGone) {
		t.Errorf("found again after it was killed: %v", err)
	}
}

// TestJobEnvAsOsExec: the environment reaches the command as os/exec
// gives it on Windows: one entry per name, compared without case, the
// last one winning, and SYSTEMROOT there even if Env left it out.
func TestJobEnvAsOsExec(t *testing.T) {
	helper := guarded(t)
	c := helper("getenv", "CORRAL_TEST_X", "SYSTEMROOT")
	var env []string
	for _, e := range c.Env {
		if !strings.HasPrefix(strings.ToUpper(e), "SYSTEMROOT=") {
			env = append(env, e)
		}
	}
	c.Env = append([]string{helperEnv + "=exit"}, env...) // the later getenv wins
	c.Env = append(c.Env, "CORRAL_TEST_X=1", "corral_test_x=2")
	var out bytes.Buffer
	c.Stdout = &out
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatalf("%v (%q)", err, out.String())
	}
	want := "CORRAL_TEST_X=2\nSYSTEMROOT=" + os.Getenv("SYSTEMROOT") + "\n"
	if got := strings.ReplaceAll(out.String(), "\r", ""); got != want {
		t.Fatalf("the command saw %q, want %q", got, want)
	}
}
