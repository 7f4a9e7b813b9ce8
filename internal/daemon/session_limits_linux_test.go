package daemon_test

// TestCoreSessionLimitsKept needs a process of its own in the VM:
// TestDaemonSurvivesASessionThatUsesUpPids moves the test process into a
// pids-only cgroup, and contain keeps the base it found first. This
// file's name sorts after that test's, so that test still runs first
// when both are run together.

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/testproc"
)

func openCoreWith(t *testing.T, state string, iso corral.Isolation) (*daemon.Daemon, daemon.Peer) {
	t.Helper()
	d, err := daemon.Open(daemon.Config{StateDir: state, Isolation: iso, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	return d, daemon.Peer{UID: os.Getuid()}
}

func trackedControllers(t *testing.T) (string, map[string]bool) {
	t.Helper()
	base, err := contain.CgroupBase()
	if err != nil {
		t.Skipf("no usable cgroup v2 here: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	avail := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		avail[c] = true
	}
	return base, avail
}

// TestCoreSessionLimitsRefused: a session asked for with limits its
// isolation cannot enforce is not created (no record, nothing run) and
// the command is a start failure that says why; a change of limits asked
// of an existing session is refused the same way, runs nothing and leaves
// its limits as they were.
func TestCoreSessionLimitsRefused(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	d, me := openCore(t) // pgroup
	ran := filepath.Join(t.TempDir(), "ran")
	res, _, err := execIn(t, d, me, daemon.ExecRequest{Session: "lim", Command: "touch " + ran, Dir: "/", Env: env,
		Limits: corral.Limits{PidsMax: 32}})
	if err != nil || res.Outcome != corral.OutcomeStartFailed || !strings.Contains(res.Error, "pgroup isolation cannot enforce") {
		t.Fatalf("create with limits under pgroup: %v %+v", err, res)
	}
	list, _ := d.List(context.Background(), me)
	if len(list) != 0 {
		t.Fatalf("a session was created although its limits were refused: %+v", list)
	}
	if _, _, err := execIn(t, d, me, daemon.ExecRequest{Session: "lim", Command: "true", Dir: "/", Env: env}); err != nil {
		t.Fatal(err)
	}
	res, _, err = execIn(t, d, me, daemon.ExecRequest{Session: "lim", Command: "touch " + ran, Dir: "/", Env: env,
		Limits: corral.Limits{MemoryMax: 64 << 20}})
	if err != nil || res.Outcome != corral.OutcomeStartFailed || !strings.Contains(res.Error, "limits were not changed") || res.LimitsChanged {
		t.Fatalf("change under pgroup: %v %+v", err, res)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("a command ran although its limits were refused")
	}
	list, _ = d.List(context.Background(), me)
	if len(list) != 1 || !list[0].Limits.IsZero() {
		t.Fatalf("limits after the refused change: %+v", list)
	}
}

// TestCoreSessionLimitsKept: a session's limits are in its record and in
// force in every shell it has: the first, one changed in place (which the
// result says), a fresh shell after the shell exited, the shell the next
// daemon took over (given its recorded limits back if its cgroup's were
// changed meanwhile), and the shell after another exit. ls gives the limits and the tree's memory and pids in use.
// It needs the memory and pids controllers (the VM).
func TestCoreSessionLimitsKept(t *testing.T) {
	if base, avail := trackedControllers(t); !avail["memory"] || !avail["pids"] {
		t.Skipf("the cgroup v2 memory and pids controllers are not available in %s (%v; a hybrid layout: run in ../shared/vm, as .ci/run does)", base, avail)
	}
	mark := testproc.Guard(t, 120*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	state := t.TempDir()
	d, me := openCoreWith(t, state, corral.IsolationCgroup)
	alive := true
	defer func() {
		if alive {
			d.Kill(context.Background(), me, nil, true)
			d.Close()
		}
	}()
	file := func(res *daemon.ExecResult, name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(res.Cgroup, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	want := corral.Limits{MemoryMax: 128 << 20, PidsMax: 64}
	res, _, err := execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "true", Dir: "/", Env: env, Limits: want})
	if err != nil || res.ExitCode != 0 || res.Limits != want || res.LimitsChanged ||
		file(res, "memory.max") != "134217728" || file(res, "pids.max") != "64" {
		t.Fatalf("create: %v %+v", err, res)
	}
	list, err := d.List(context.Background(), me)
	if err != nil || len(list) != 1 || list[0].Limits != want || list[0].Usage == nil ||
		list[0].Usage.MemoryBytes == nil || list[0].Usage.Pids == nil || *list[0].Usage.Pids < 1 {
		t.Fatalf("list: %v %+v", err, list)
	}
	t.Logf("ls: memory %d bytes, %d pids", *list[0].Usage.MemoryBytes, *list[0].Usage.Pids)

	res, _, err = execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "true", Dir: "/", Env: env,
		Limits: corral.Limits{MemoryMax: 64 << 20}})
	want.MemoryMax = 64 << 20
	if err != nil || !res.LimitsChanged || res.Limits != want || file(res, "memory.max") != "67108864" {
		t.Fatalf("change in place: %v %+v", err, res)
	}
	// The shell exits: the next command's fresh shell has the limits.
	execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "exit 3", Dir: "/", Env: env})
	res, _, err = execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "true", Dir: "/", Env: env})
	if err != nil || file(res, "memory.max") != "67108864" || file(res, "pids.max") != "64" {
		t.Fatalf("after a restart of the shell: %v %+v", err, res)
	}

	// A daemon that dies after it changed the cgroup and before it
	// recorded the change (here: a write of our own) told no client:
	// the next daemon gives the shell its recorded limits back.
	if err := os.WriteFile(filepath.Join(res.Cgroup, "memory.max"), []byte("104857600"), 0); err != nil {
		t.Fatal(err)
	}
	d.Close() // the shell goes on; the next daemon takes it over
	d, me = openCoreWith(t, state, corral.IsolationCgroup)
	list, err = d.List(context.Background(), me)
	if err != nil || len(list) != 1 || list[0].Limits != want {
		t.Fatalf("list after the take-over: %v %+v", err, list)
	}
	for deadline := time.Now().Add(10 * time.Second); file(res, "memory.max") != "67108864"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after the take-over, memory.max is %s, not the recorded 64 MiB", file(res, "memory.max"))
		}
	}
	execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "exit 4", Dir: "/", Env: env})
	res, _, err = execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "true", Dir: "/", Env: env})
	if err != nil || file(res, "memory.max") != "67108864" || file(res, "pids.max") != "64" {
		t.Fatalf("a shell restarted after the take-over: %v %+v", err, res)
	}
	alive = false
	if _, err := d.Kill(context.Background(), me, nil, true); err != nil {
		t.Error(err)
	}
	d.Close()
}
