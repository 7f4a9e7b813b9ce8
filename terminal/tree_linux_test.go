//go:build linux

package terminal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/holder"
	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestHolderIsAContainedTree: the holder is started through the run
// layer, in a session of its own, its identity given to OnHolderStart
// before it runs; stopping that tree ends the holder and the program
// with it (the whole tree), and a failing OnHolderStart runs nothing.
func TestHolderIsAContainedTree(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	var recorded corral.Identity
	dir := filepath.Join(testproc.TempDir(t), "sess")
	cfg := Config{Path: "/bin/sh", Holder: []string{os.Args[0]},
		HolderEnv: append(testproc.Env(mark), holderEnv+"=1"), Env: progEnv(mark),
		OnHolderStart: func(id corral.Identity) error {
			// The holder has not run yet: it has not recorded itself.
			if _, err := os.Stat(filepath.Join(dir, holder.HolderName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the holder ran before its identity was recorded: %v", err)
			}
			recorded = id
			return nil
		}}
	tm, err := Open(ctx10(t), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tree := tm.HolderTree()
	if tree == nil {
		t.Fatal("Open gave no holder tree")
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			tree.Stop(-1)
			tree.Wait()
		}
	})
	if recorded.Pid != tm.HolderPid() || recorded.Pid == 0 || recorded.StartTime == 0 {
		t.Fatalf("recorded %+v, holder pid %d", recorded, tm.HolderPid())
	}
	if st, err := proc.ReadStat(recorded.Pid); err != nil || st.StartTime != recorded.StartTime {
		t.Fatalf("the recorded start time %d is not the holder's: %+v %v", recorded.StartTime, st, err)
	}
	if sid, err := unix.Getsid(recorded.Pid); err != nil || sid != recorded.Pid {
		t.Fatalf("the holder leads no session of its own: sid %d %v", sid, err)
	}
	if recorded.Pgid != recorded.Pid {
		t.Fatalf("the holder's group %d is not its pid %d", recorded.Pgid, recorded.Pid)
	}
	prog := tm.Program()
	if prog == nil || !testproc.Alive(prog.Pid) {
		t.Fatalf("no live program: %+v", prog)
	}
	t.Logf("holder contained by %s %s, program by %s %s", recorded.Isolation, recorded.Cgroup, prog.Isolation, prog.Cgroup)
	if recorded.Isolation == corral.IsolationCgroup && !strings.HasPrefix(prog.Cgroup, recorded.Cgroup+"/") {
		t.Errorf("the program's cgroup %s is not inside its holder's %s", prog.Cgroup, recorded.Cgroup)
	}
	waitText(t, tm, `^\$`)
	// The whole tree: the holder's tree stopped, the program goes too.
	tree.Stop(time.Second)
	res, _ := tree.Wait()
	stopped = true
	if res == nil {
		t.Fatal("no result")
	}
	for _, pid := range []int{recorded.Pid, prog.Pid} {
		if testproc.Alive(pid) {
			t.Errorf("%d outlived its holder's tree", pid)
		}
	}
	if _, err := Dial(ctx10(t), dir); !errors.Is(err, ErrGone) {
		t.Errorf("Dial after the tree was stopped: %v, want ErrGone", err)
	}

	// A hook that fails: nothing runs, the error says why.
	cfg.OnHolderStart = func(corral.Identity) error { return errors.New("disk full") }
	_, err = Open(context.Background(), filepath.Join(testproc.TempDir(t), "sess2"), cfg)
	if err == nil || !errors.Is(err, corral.ErrHook) {
		t.Fatalf("Open with a failing OnHolderStart: %v, want ErrHook", err)
	}
}

// TestRelativeHolderPath: a holder named by a path relative to this
// process's directory is found, though the holder runs in /.
func TestRelativeHolderPath(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	dir := testproc.TempDir(t)
	t.Chdir(filepath.Dir(os.Args[0]))
	rel := "./" + filepath.Base(os.Args[0])
	tm, err := Open(ctx10(t), filepath.Join(dir, "sess"), Config{Path: "/bin/sh", Holder: []string{rel},
		HolderEnv: append(testproc.Env(mark), holderEnv+"=1"), Env: progEnv(mark)})
	if err != nil {
		t.Fatalf("a holder at %s: %v", rel, err)
	}
	if _, err := tm.Close(ctx10(t)); err != nil {
		t.Fatal(err)
	}
}
