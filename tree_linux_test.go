package corral_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

func init() {
	// starttree ISOLATION FILE SCRIPT: start SCRIPT with /bin/sh as a
	// corral tree, write its identity (as OnStart got it) to FILE, then
	// sleep until killed: the owner of a recorded tree that a test
	// SIGKILLs.
	helpers["starttree"] = func(args []string) int {
		c := corral.Command("/bin/sh", "-c", args[2])
		c.Isolation = corral.Isolation(args[0])
		c.OnStart = func(id corral.Identity) error {
			b, err := json.Marshal(id)
			if err != nil {
				return err
			}
			tmp := args[1] + ".tmp"
			if err := os.WriteFile(tmp, b, 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, args[1])
		}
		if _, err := c.Start(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		time.Sleep(time.Hour)
		return 0
	}
}

// readyWriter closes ready at the first write.
type readyOut struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	ready chan struct{}
}

func newReadyOut() *readyOut { return &readyOut{ready: make(chan struct{})} }

func (w *readyOut) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.once.Do(func() { close(w.ready) })
	return len(p), nil
}

func (w *readyOut) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startReady starts c with its stdout in a readyOut and waits for the
// command's first write; a tree that never writes is stopped before the
// test fails.
func startReady(t *testing.T, c *corral.Cmd) (*corral.Tree, *readyOut) {
	t.Helper()
	w := newReadyOut()
	c.Stdout = w
	tree, err := c.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.ready:
	case <-time.After(20 * time.Second):
		tree.Stop(-1)
		tree.Wait()
		t.Fatal("the command never wrote")
	}
	return tree, w
}

func pidsOf(t *testing.T, s string) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(s) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("not a pid list: %q", s)
		}
		pids = append(pids, p)
	}
	return pids
}

func TestTreeStartWait(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "echo hi; echo err >&2; exit 3")
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		tree, err := c.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r, err := tree.Wait()
		if r.Outcome != corral.OutcomeExited || r.ExitCode != 3 || !errors.Is(err, corral.ErrExitStatus) {
			t.Fatalf("got %+v, %v", r, err)
		}
		if out.String() != "hi\n" || errb.String() != "err\n" || r.StdoutBytes != 3 || r.StderrBytes != 4 {
			t.Fatalf("output %q %q, result %+v", out.String(), errb.String(), r)
		}
		if id := tree.Identity(); r.Pid != id.Pid || r.Isolation != string(id.Isolation) || r.Cgroup != id.Cgroup {
			t.Fatalf("result %+v does not name the tree %+v", r, id)
		}
		select {
		case <-tree.Exited():
		default:
			t.Fatal("Exited not closed after Wait")
		}
		r2, err2 := tree.Wait()
		if r2 != r || err2 != err {
			t.Fatalf("second Wait: %p %v, want %p %v", r2, err2, r, err)
		}

		// A start failure comes from Start, with its result.
		_, err = corral.Command("/nonexistent/cmd").Start(context.Background())
		var re *corral.RunError
		if !errors.As(err, &re) || re.Result.Outcome != corral.OutcomeStartFailed || !errors.Is(err, corral.ErrNotFound) {
			t.Fatalf("start failure: %v", err)
		}
	})
}

func TestTreeStopDuringRun(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		// The root ignores SIGTERM, so only the kill after the grace
		// ends it; its children do not.
		c := sh(iso, mark, "sleep 60 & echo $! >"+dir+"/a; (setsid sleep 60 & echo $! >"+dir+"/b); trap '' TERM; echo ready; while :; do sleep 1; done")
		tree, _ := startReady(t, c)
		a := testproc.PidFile(t, dir+"/a", 5*time.Second)
		b := testproc.PidFile(t, dir+"/b", 5*time.Second)
		start := time.Now()
		tree.Stop(300 * time.Millisecond)
		el := time.Since(start)
		if el < 250*time.Millisecond || el > 10*time.Second {
			t.Fatalf("Stop returned after %v; want the 300ms grace, then the kill", el)
		}
		r, err := tree.Wait()
		if r.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrCancelled) || !errors.Is(err, corral.ErrStopped) {
			t.Fatalf("got %+v, %v", r, err)
		}
		if r.Signal != int(syscall.SIGKILL) || r.KillFailed {
			t.Fatalf("root should have been killed after the grace: %+v", r)
		}
		for _, p := range []int{r.Pid, a, b} {
			if testproc.Alive(p) {
				t.Fatalf("process %d survived Stop", p)
			}
		}
		if r.Cgroup != "" {
			if _, err := os.Stat(r.Cgroup); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("cgroup %s left behind: %v", r.Cgroup, err)
			}
		}
	})
}

func TestTreeStopEndsDescendantsGrace(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		// The root exits at once; its child ignores SIGTERM, so the
		// default policy's 30 s grace would run out before it dies.
		c := sh(iso, mark, "(trap '' TERM; echo ready; exec sleep 60) & echo $! >"+dir+"/a; sleep 0.3")
		c.Grace = 30 * time.Second
		tree, _ := startReady(t, c)
		a := testproc.PidFile(t, dir+"/a", 5*time.Second)
		<-tree.Exited()
		time.Sleep(100 * time.Millisecond) // in the grace now
		start := time.Now()
		tree.Stop(-1)
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("Stop took %v", el)
		}
		r, err := tree.Wait()
		if err != nil || r.Outcome != corral.OutcomeExited || r.ExitCode != 0 {
			t.Fatalf("the root's own outcome should stand: %+v, %v", r, err)
		}
		if r.DescendantsKilled != 1 || testproc.Alive(a) {
			t.Fatalf("descendant %d not killed and counted: %+v", a, r)
		}
		if r.Duration > 20*time.Second {
			t.Fatalf("Stop did not cut the grace: %v", r.Duration)
		}
	})
}

func TestTreeStopAfterExitHarmless(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		tree, err := sh(iso, mark, "exit 0").Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r, err := tree.Wait()
		if err != nil || r.Outcome != corral.OutcomeExited {
			t.Fatalf("got %+v, %v", r, err)
		}
		before := *r
		start := time.Now()
		tree.Stop(time.Minute)
		tree.Stop(-1)
		if el := time.Since(start); el > time.Second {
			t.Fatalf("Stop after the tree settled took %v", el)
		}
		r2, err2 := tree.Wait()
		if r2 != r || err2 != nil || r2.Outcome != before.Outcome || r2.ExitCode != before.ExitCode ||
			!r2.EndedAt.Equal(before.EndedAt) {
			t.Fatalf("Stop changed the result: %+v -> %+v, %v", before, *r2, err2)
		}
	})
}

// procStart reads field 22 of /proc/PID/stat.
func procStart(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTreeIdentityMatchesProc(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		var onStart corral.Identity
		c := sh(iso, mark, "echo ready; exec sleep 60")
		c.OnStart = func(id corral.Identity) error { onStart = id; return nil }
		tree, _ := startReady(t, c)
		defer tree.Wait()
		defer tree.Stop(-1)
		id := tree.Identity()
		if id != onStart {
			t.Fatalf("Identity %+v, OnStart got %+v", id, onStart)
		}
		if id.Isolation != iso || id.Pid <= 0 || id.Pgid != id.Pid {
			t.Fatalf("identity %+v", id)
		}
		if got := procStart(t, id.Pid); got != id.StartTime {
			t.Fatalf("start time %d, /proc says %d", id.StartTime, got)
		}
		boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if strings.TrimSpace(string(boot)) != id.BootID {
			t.Fatalf("boot id %q, /proc says %q", id.BootID, boot)
		}
		pgid, _ := syscall.Getpgid(id.Pid)
		if pgid != id.Pgid {
			t.Fatalf("pgid %d, the kernel says %d", id.Pgid, pgid)
		}
		// Read while the root may be in its exec of sleep (the file
		// reads empty then): again until it is through.
		var env []byte
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			env, _ = os.ReadFile(fmt.Sprintf("/proc/%d/environ", id.Pid))
			if bytes.Contains(env, []byte("\x00"+id.Marker+"\x00")) {
				break
			}
		}
		if !bytes.Contains(env, []byte("\x00"+id.Marker+"\x00")) || !strings.HasPrefix(id.Marker, corral.MarkerEnv+"=") {
			t.Fatalf("marker %q not in the root's environment", id.Marker)
		}
		if iso == corral.IsolationCgroup {
			if rel, _ := testproc.Cgroup2(id.Pid); rel == "" || !strings.HasSuffix(id.Cgroup, rel) {
				t.Fatalf("cgroup %q, /proc says %q", id.Cgroup, rel)
			}
		} else if id.Cgroup != "" {
			t.Fatalf("pgroup tree names a cgroup: %+v", id)
		}
	})
}

func TestAdoptRecordedTree(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		// The owner dies without a word; its tree goes on.
		id, a, b := ownerlessTree(t, iso, mark, false)
		if !testproc.Alive(id.Pid) || !testproc.Alive(a) || !testproc.Alive(b) {
			t.Fatalf("the tree did not outlive its owner")
		}

		tree, err := corral.Adopt(id)
		if err != nil {
			t.Fatalf("Adopt: %v", err)
		}
		if tree.Identity() != id {
			t.Fatalf("adopted identity %+v, recorded %+v", tree.Identity(), id)
		}
		tree.Stop(200 * time.Millisecond)
		r, err := tree.Wait()
		if r.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrStopped) || r.KillFailed {
			t.Fatalf("got %+v, %v", r, err)
		}
		for _, p := range []int{id.Pid, a, b} {
			if testproc.Alive(p) {
				t.Fatalf("process %d of the adopted tree survived", p)
			}
		}
		if _, err := corral.Adopt(id); !errors.Is(err, corral.ErrGone) {
			t.Fatalf("Adopt of a stopped tree: %v, want ErrGone", err)
		}
	})
}

func TestAdoptRefusesReusedPid(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "echo ready; exec sleep 60")
		tree, _ := startReady(t, c)
		defer tree.Wait()
		defer tree.Stop(-1)
		id := tree.Identity()

		// The recorded pid now names another process: this one, as the
		// leader of its own group (what a pgroup record always says; this
		// process's own group may be 0, under the VM's init).
		other := id
		other.Pid, other.Pgid = os.Getpid(), os.Getpid()
		// The recorded pid is the root's, but started at another time.
		later := id
		later.StartTime++
		for name, forged := range map[string]corral.Identity{"other process": other, "other start": later} {
			at, err := corral.Adopt(forged)
			if !errors.Is(err, corral.ErrGone) {
				if at != nil {
					at.Stop(-1)
				}
				t.Fatalf("%s: Adopt %+v: %v, want ErrGone", name, forged, err)
			}
		}
		if !testproc.Alive(id.Pid) {
			t.Fatal("a refused Adopt touched the tree")
		}
		select {
		case <-tree.Exited():
			t.Fatal("a refused Adopt touched the tree")
		default:
		}
	})
}

func TestTreeConcurrentStopWait(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "sleep 60 & sleep 60 & echo ready; wait")
		tree, _ := startReady(t, c)
		var wg sync.WaitGroup
		results := make([]*corral.Result, 4)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, _ := tree.Wait()
				results[i] = r
			}()
		}
		for _, g := range []time.Duration{time.Minute, 50 * time.Millisecond, -1, 0, time.Second} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tree.Stop(g)
				_ = tree.Identity()
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("Stop and Wait did not return: the minute's grace was not cut by the shorter ones")
		}
		for _, r := range results {
			if r != results[0] {
				t.Fatal("Waits returned different results")
			}
		}
		if r := results[0]; r.Outcome != corral.OutcomeCancelled || r.KillFailed {
			t.Fatalf("got %+v", r)
		}
	})
}

func TestFindOrphanKillsWhatIsLeft(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		id, a, b := ownerlessTree(t, iso, mark, true)
		// The root dies too (by pid: it is ours, it carries our
		// marker), leaving its descendants.
		syscall.Kill(id.Pid, syscall.SIGKILL)
		for deadline := time.Now().Add(5 * time.Second); testproc.Alive(id.Pid); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("root did not die")
			}
		}
		if _, err := corral.Adopt(id); !errors.Is(err, corral.ErrGone) {
			t.Fatalf("Adopt of a tree whose root is gone: %v, want ErrGone", err)
		}
		o, err := corral.FindOrphan(id)
		if err != nil {
			t.Fatal(err)
		}
		pids, err := o.Members()
		if err != nil || !containsAll(pids, a, b) {
			t.Fatalf("members %v (%v), want %d and %d", pids, err, a, b)
		}
		if err := o.Kill(); err != nil {
			t.Fatal(err)
		}
		if testproc.Alive(a) || testproc.Alive(b) {
			sa, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a))
			sb, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", b))
			t.Fatalf("an orphan survived Kill: %s / %s", sa, sb)
		}
		if err := o.Kill(); err != nil {
			t.Fatalf("second Kill: %v", err)
		}
	})
}

// ownerlessTree has a starttree helper start a tree of a root, a child
// in the root's group (pid a) and one that left it by setsid (pid b),
// then SIGKILLs the helper (our own child, by pid), so the tree is left
// with no owner and only its recorded identity to find it by. With
// pastExec it first waits until a and b run sleep: a process in the
// middle of an exec reads with an empty environment, so a scan by marker
// cannot tell it is the tree's (see the report on the pgroup backend).
func ownerlessTree(t *testing.T, iso corral.Isolation, mark string, pastExec bool) (id corral.Identity, a, b int) {
	t.Helper()
	return ownerlessTreeOf(t, iso, mark, pastExec, "wait")
}

// ownerlessTreeOf is ownerlessTree with the root's last command (after it
// started a and b) given.
func ownerlessTreeOf(t *testing.T, iso corral.Isolation, mark string, pastExec bool, last string) (id corral.Identity, a, b int) {
	t.Helper()
	dir := t.TempDir()
	idFile := filepath.Join(dir, "id.json")
	owner := helperCmd("starttree", string(iso), idFile,
		"sleep 60 & echo $! >"+dir+"/a; (setsid sleep 60 & echo $! >"+dir+"/b); "+last)
	owner.Env = append(owner.Env, mark)
	var oerr bytes.Buffer
	owner.Stderr = &oerr
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	a = testproc.PidFile(t, dir+"/a", 10*time.Second)
	b = testproc.PidFile(t, dir+"/b", 10*time.Second)
	if pastExec {
		waitExec(t, a, "sleep")
		waitExec(t, b, "sleep")
	}
	raw, err := os.ReadFile(idFile)
	if err == nil {
		err = json.Unmarshal(raw, &id)
	}
	owner.Process.Kill()
	owner.Wait()
	if err != nil {
		t.Fatalf("no identity recorded: %v (%s)", err, oerr.String())
	}
	return id, a, b
}

func containsAll(pids []int, want ...int) bool {
	for _, w := range want {
		found := false
		for _, p := range pids {
			found = found || p == w
		}
		if !found {
			return false
		}
	}
	return true
}

// waitExec waits until pid runs prog.
func waitExec(t *testing.T, pid int, prog string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if strings.HasPrefix(string(b), prog+"\x00") && len(env) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d does not run %s: %q", pid, prog, b)
		}
	}
}

// TestStopTermsEachProcessOnce: a graceful stop sends SIGTERM exactly once
// to every process, in the tree's group (signalled as a group) and out of
// it (setsid, signalled one by one): a second SIGTERM is what many
// programs take as "quit now, skip the cleanup".
func TestStopTermsEachProcessOnce(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		// Each process logs every SIGTERM it gets and goes on, so only
		// the kill after the grace ends it. sleep runs in the
		// background so the trap runs as soon as the signal comes.
		body := func(name string) string {
			return fmt.Sprintf(`trap 'echo %s >>%s/log' TERM; echo %s >>%s/up; while :; do sleep 0.05 & wait; done`, name, dir, name, dir)
		}
		script := fmt.Sprintf(`(%s) & (%s) & setsid sh -c '%s' & %s`,
			body("g1"), body("g2"), strings.ReplaceAll(body("out"), "'", `'\''`), body("root"))
		c := sh(iso, mark, script)
		tree, err := c.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			b, _ := os.ReadFile(dir + "/up")
			if len(strings.Fields(string(b))) == 4 {
				break
			}
			if time.Now().After(deadline) {
				tree.Stop(-1)
				tree.Wait()
				t.Fatalf("not all up: %q", b)
			}
		}
		tree.Stop(700 * time.Millisecond)
		r, _ := tree.Wait()
		if r.Outcome != corral.OutcomeCancelled || r.KillFailed {
			t.Fatalf("got %+v", r)
		}
		b, _ := os.ReadFile(dir + "/log")
		got := map[string]int{}
		for _, f := range strings.Fields(string(b)) {
			got[f]++
		}
		for _, name := range []string{"root", "g1", "g2", "out"} {
			if got[name] != 1 {
				t.Errorf("%s got %d SIGTERMs, want 1 (log %q)", name, got[name], b)
			}
		}
	})
}

func TestExtraFilesReachTheRoot(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		c := sh(iso, mark, "echo through-3 >&3")
		c.ExtraFiles = []*os.File{w}
		tree, err := c.Start(context.Background())
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tree.Wait(); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		n, _ := r.Read(b)
		if string(b[:n]) != "through-3\n" {
			t.Fatalf("descriptor 3 carried %q", b[:n])
		}
	})
}

func TestTreeStopEndsKeepDetachedDrain(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		// The root exits at once; its child holds stdout, so KeepDetached
		// would wait the whole 30 s drain bound for it to let go.
		c := sh(iso, mark, "sleep 60 & echo $!")
		c.Descendants = corral.KeepDetached
		c.Drain = 30 * time.Second
		tree, w := startReady(t, c)
		<-tree.Exited()
		time.Sleep(100 * time.Millisecond)
		tree.Stop(-1)
		r, err := tree.Wait()
		holder := pidsOf(t, w.String())
		if err != nil || r.Outcome != corral.OutcomeExited || r.Duration > 20*time.Second {
			t.Fatalf("got %+v, %v", r, err)
		}
		if len(holder) != 1 || len(r.StdioHeldBy) != 1 || r.StdioHeldBy[0] != holder[0] {
			t.Fatalf("holder %v not named: %+v", holder, r)
		}
		// SIGKILLed; it may still be tearing itself down (its pipes
		// close before it is a zombie).
		for deadline := time.Now().Add(5 * time.Second); testproc.Alive(holder[0]); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("holder %d not killed", holder[0])
			}
		}
	})
}

// TestAdoptRefusesAForeignRoot forges, from a genuine record, one naming
// a live process this test started outside corral, with its real pid,
// start time and boot, as the leader of its own group with a second
// member (what a pgroup record says), and the genuine tree's cgroup and
// marker: pid, start time and boot prove only which process a record
// names, not that corral started it. Adopt and FindOrphan must refuse it
// (ErrNotOurs) and signal neither process; so must a record whose marker
// is an entry the foreign process does carry but corral does not make.
// The genuine record still adopts.
func TestAdoptRefusesAForeignRoot(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		id, _, _ := ownerlessTree(t, iso, mark, false)
		leader, member := testproc.ForeignGroup(t, mark)

		st, err := proc.ReadStat(leader)
		if err != nil {
			t.Fatal(err)
		}
		forged := id
		forged.Pid, forged.Pgid, forged.StartTime = leader, leader, st.StartTime
		strange := forged
		strange.Marker = mark // in the foreign process's environment, not a tree marker
		for name, f := range map[string]corral.Identity{"foreign root": forged, "foreign marker": strange} {
			at, err := corral.Adopt(f)
			if at != nil {
				at.Release() // signals nothing; its Wait ends with the process
			}
			if !errors.Is(err, corral.ErrNotOurs) {
				t.Errorf("%s: Adopt %+v: %v, want ErrNotOurs", name, f, err)
			} else if !strings.Contains(err.Error(), strconv.Itoa(leader)) || !strings.Contains(err.Error(), "nothing was signalled") {
				t.Errorf("%s: Adopt's error does not say which process and that nothing was signalled: %v", name, err)
			}
			if o, err := corral.FindOrphan(f); !errors.Is(err, corral.ErrNotOurs) {
				ms := []int{}
				if o != nil {
					ms, _ = o.Members()
				}
				t.Errorf("%s: FindOrphan %+v: %v (members %v), want ErrNotOurs", name, f, err, ms)
			}
		}
		time.Sleep(100 * time.Millisecond) // a signal sent is delivered by now
		unsignalled(t, leader, member)

		// The genuine record still adopts, and stops its tree.
		tree, err := corral.Adopt(id)
		if err != nil {
			t.Fatalf("Adopt of the genuine record: %v", err)
		}
		tree.Stop(200 * time.Millisecond)
		if r, err := tree.Wait(); r.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrStopped) {
			t.Fatalf("adopted genuine tree: %+v, %v", r, err)
		}
		if testproc.Alive(id.Pid) {
			t.Fatal("the genuine root survived its Stop")
		}
		unsignalled(t, leader, member)
	})
}

// unsignalled fails the test unless each pid is alive and running (not
// stopped): sleep keeps the default action of every signal corral sends
// (TERM, INT, HUP and KILL end it, STOP stops it).
func unsignalled(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		st, err := proc.ReadStat(pid)
		if err != nil || st.Zombie() || st.State == 'T' || st.State == 't' {
			t.Fatalf("process %d that corral never started was signalled: %+v, %v", pid, st, err)
		}
	}
}

// TestAdoptedStopIsBoundedWhenTheRootLeftItsCgroup: an adopted cgroup
// tree whose root moved itself out of the tree's cgroup (into the
// "released" cgroup beside it, which the tree's owner may write) after it
// was proved the tree's at adoption. Its Stop must still end it, through
// the pidfd that pins the proved root, and Wait must return within its
// bounds: before, cgroup.kill emptied the cgroup, the root lived on
// unsignalled and Wait waited for it for ever.
func TestAdoptedStopIsBoundedWhenTheRootLeftItsCgroup(t *testing.T) {
	matrix.NeedIsolation(t, "cgroup")
	mark := testproc.Guard(t, 60*time.Second)
	// The root stays after its children are gone (it waits for none).
	id, a, b := ownerlessTreeOf(t, corral.IsolationCgroup, mark, false, "exec sleep 60")
	waitExec(t, id.Pid, "sleep")
	tree, err := corral.Adopt(id)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	rel := filepath.Join(filepath.Dir(id.Cgroup), "released")
	if err := os.Mkdir(rel, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rel, "cgroup.procs"), []byte(strconv.Itoa(id.Pid)), 0); err != nil {
		t.Fatalf("move the root out of its cgroup: %v", err)
	}
	done := make(chan struct{})
	var r *corral.Result
	go func() {
		tree.Stop(200 * time.Millisecond)
		r, _ = tree.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(25 * time.Second):
		syscall.Kill(id.Pid, syscall.SIGKILL) // ours: it carries our marker; lets Wait return
		<-done
		t.Fatal("Stop and Wait of the adopted tree did not return in 25 s: its root had left the cgroup")
	}
	for _, p := range []int{id.Pid, a, b} {
		if testproc.Alive(p) {
			t.Fatalf("process %d of the adopted tree survived its Stop (result %+v)", p, r)
		}
	}
	if r.Outcome != corral.OutcomeCancelled || r.KillFailed {
		t.Fatalf("result %+v", r)
	}
}
