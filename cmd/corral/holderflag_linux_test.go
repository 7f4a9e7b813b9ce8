package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestDaemonHolderFlag: `corral daemon --holder PATH` runs terminal
// sessions' holders with the small corral-holder binary (the per-session
// cost), which serves the same verbs and is taken over by the next
// daemon; a --holder that could not be one is refused before anything
// starts.
func TestDaemonHolderFlag(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain to build corral-holder with (as in the VM): " + err.Error())
	}
	e := newDaemonEnv(t)
	bin := filepath.Join(testproc.TempDir(t), "corral-holder")
	if out, err := exec.Command("go", "build", "-o", bin, "../corral-holder").CombinedOutput(); err != nil {
		t.Fatalf("go build corral-holder: %v\n%s", err, out)
	}
	for _, tc := range []struct{ holder, want string }{
		{"corral-holder", "give an absolute path"},
		{"/nonexistent/corral-holder", "no such file"},
		{"/etc/passwd", "not an executable file"},
	} {
		_, errs, rc := e.run("daemon", "--holder", tc.holder)
		if rc != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("daemon --holder %s: exit %d, %q (want 2 and %q)", tc.holder, rc, errs, tc.want)
		}
	}
	if _, errs, rc := e.run("daemon", "status", "--holder", bin); rc != 2 || !strings.Contains(errs, "is for running the daemon") {
		t.Errorf("daemon status --holder: exit %d, %q", rc, errs)
	}
	d := startOpsDaemon(t, e, "--holder", bin)
	e.must("term", "open", "small", "--", "sh", "-c", "echo small-holder; exec sleep 600")
	e.must("term", "wait", "small", "--text", "small-holder", "--timeout", "10s")
	var info []struct {
		Name      string `json:"name"`
		HolderPid int    `json:"holder_pid"`
	}
	if err := json.Unmarshal([]byte(e.must("ls", "--json")), &info); err != nil || len(info) != 1 || info[0].HolderPid == 0 {
		t.Fatalf("ls --json: %+v %v", info, err)
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(info[0].HolderPid) + "/exe")
	if err != nil || exe != bin {
		t.Fatalf("the holder (pid %d) runs %q (%v), want %s", info[0].HolderPid, exe, err, bin)
	}
	// The next daemon (with no --holder) takes the small holder over.
	e.must("daemon", "stop")
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	e.must("term", "wait", "small", "--text", "small-holder", "--timeout", "10s")
	if out := e.must("term", "screen", "small"); !strings.HasPrefix(out, "small-holder\n") {
		t.Errorf("the screen after a take-over: %q", out)
	}
	e.must("kill", "small")
	deadline := time.Now().Add(10 * time.Second)
	for testproc.Alive(info[0].HolderPid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if testproc.Alive(info[0].HolderPid) {
		t.Errorf("kill left the holder %d", info[0].HolderPid)
	}
}
