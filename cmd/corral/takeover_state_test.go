//go:build linux

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestTakeoverStateSurvivesAReboot: a command that was running when the
// daemon died goes on in its held shell and may change the shell's cwd
// and environment after its client is gone. The next daemon learns them
// when it takes the shell over; a reboot after that must not lose them.
func TestTakeoverStateSurvivesAReboot(t *testing.T) {
	e := newDaemonEnv(t)
	dir, later := t.TempDir(), t.TempDir()
	if _, rc := e.exec("s", "cd "+dir+"; export PHASE=before"); rc != 0 {
		t.Fatal("first command failed")
	}
	if _, rc := e.exec("idle", "true"); rc != 0 {
		t.Fatal("idle's first command failed")
	}
	idleUsed := e.ls()["idle"].LastUsed
	time.Sleep(1100 * time.Millisecond) // last use is kept in seconds
	started, done := filepath.Join(dir, "started"), filepath.Join(dir, "done")
	code := "echo $$ > " + started + "; sleep 1; cd " + later + "; export PHASE=after; : > " + done
	c := cli(t, e.mark, e.state, "exec", "-s", "s", "--", code)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	testproc.PidFile(t, started, 5*time.Second)
	e.killDaemon()
	c.Wait() // its daemon is gone: the client fails
	// The command finishes in its shell with no daemon watching.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never finished in its held shell")
		}
	}
	before := e.ls()["s"] // a new daemon takes the idle shell over
	if before.State != "up" {
		t.Fatalf("after the take-over: %+v", before)
	}
	// Let the take-over's resync land, then reboot: the daemon stops
	// (letting the shell go) and the shell dies; only the record is left.
	for deadline := time.Now().Add(5 * time.Second); e.ls()["s"].Cwd != later; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the taken-over session never showed its real cwd %s: %+v", later, e.ls()["s"])
		}
	}
	// A take-over is no use of a session: its last use stays.
	if got := e.ls()["idle"].LastUsed; got != idleUsed {
		t.Errorf("the idle session's last use moved from %s to %s at the take-over", idleUsed, got)
	}
	e.run("daemon", "stop")
	syscall.Kill(before.ShellPid, syscall.SIGKILL) // ours: recorded by our daemon
	if !waitGone(before.ShellPid, 5*time.Second) {
		t.Fatal("the shell did not die")
	}
	if out, rc := e.exec("s", `echo "$PWD $PHASE"`); rc != 0 || out != later+" after\n" {
		t.Fatalf("after a reboot that followed a take-over: %q %d, want %q", out, rc, later+" after\n")
	}
}
