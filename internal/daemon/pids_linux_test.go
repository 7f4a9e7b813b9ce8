package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestDaemonSurvivesASessionThatUsesUpPids: the daemon (this test process)
// and its sessions are in one cgroup with pids.max 300; the daemon gives
// the sessions' parent cgroup a limit of its own below that, so a session
// that forks until it can fork no more leaves the daemon room to make
// threads (here 40 at once, as a busy daemon would), serve, and kill the
// session. Without the sessions' own limit the runtime dies of the thread
// it cannot make. It needs cgroup v2 at /sys/fs/cgroup with the pids
// controller, as ../shared/vm/run.sh gives; it must run before anything
// else in this process uses cgroups (contain fixes its base once).
func TestDaemonSurvivesASessionThatUsesUpPids(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup")
	}
	self, ok := testproc.Cgroup2(os.Getpid())
	parent := filepath.Join("/sys/fs/cgroup", self)
	ctl, _ := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if !ok || !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " pids ") {
		t.Skip("no cgroup v2 pids controller at /sys/fs/cgroup for this process (here pids is bound to cgroup v1): run it in ../shared/vm/run.sh")
	}
	if sub, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control")); !strings.Contains(string(sub), "pids") {
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
			t.Skipf("cannot enable pids below %s: %v", parent, err)
		}
	}
	mark := testproc.Guard(t, 120*time.Second)
	var rb [4]byte
	rand.Read(rb[:])
	cg := filepath.Join(parent, "corral-pids-test-"+hex.EncodeToString(rb[:]))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	const limit = 300
	if err := os.WriteFile(filepath.Join(cg, "pids.max"), []byte(strconv.Itoa(limit)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		for _, dir := range []string{"corral/released", "corral", "daemon", ""} {
			if err := os.Remove(filepath.Join(cg, dir)); err != nil && !os.IsNotExist(err) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	state := t.TempDir()
	var logb testproc.Buffer
	stop := runDaemon(t, daemon.Config{StateDir: state, Isolation: "cgroup", Log: slog.New(slog.NewTextHandler(&logb, nil))})
	c, err := client.Dial(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Kill(context.Background(), true)
		c.Close()
		stop()
	}()
	if b, _ := os.ReadFile("/proc/self/cgroup"); !strings.Contains(string(b), filepath.Base(cg)+"/daemon\n") {
		t.Errorf("the daemon is not in a leaf of its own: %s", b)
	}
	got, _ := os.ReadFile(filepath.Join(cg, "corral", "pids.max"))
	t.Logf("sessions' pids.max: %s", strings.TrimSpace(string(got)))
	if n, _ := strconv.Atoi(strings.TrimSpace(string(got))); n <= 0 || n >= limit {
		t.Errorf("the sessions' cgroup has pids.max %q, want a limit below %d\n%s", got, limit, logb.String())
	}
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	run := func(name, code string) (string, error) {
		var out strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := c.Exec(ctx, name, code, client.ExecOptions{Stdout: &out, Stderr: io.Discard, Dir: "/", Env: env})
		if err != nil && res != nil {
			err = fmt.Errorf("%w: %s", err, res.Error)
		}
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d (%s) %s", res.ExitCode, res.Outcome, res.Error)
		}
		return out.String(), err
	}
	if out, err := run("ok", "echo up"); err != nil || out != "up\n" {
		t.Fatalf("ok: %q %v\n%s", out, err, logb.String())
	}
	if _, err := run("bomb", "(while :; do sleep 1000 & done) >/dev/null 2>&1 &"); err != nil {
		t.Fatalf("bomb: %v", err)
	}
	current := func() int {
		b, _ := os.ReadFile(filepath.Join(cg, "corral", "pids.current"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ev, _ := os.ReadFile(filepath.Join(cg, "corral", "pids.events"))
		cgEv, _ := os.ReadFile(filepath.Join(cg, "pids.events"))
		// Before kernel 6.13 a refused fork is counted in the forking
		// task's own cgroup, the session's tree, once the pids controller
		// is enabled below corral/ (as limits need), else in corral/.
		refused := strings.Contains(string(ev), "max ") && !strings.Contains(string(ev), "max 0") || !strings.Contains(string(cgEv), "max 0")
		trees, _ := filepath.Glob(filepath.Join(cg, "corral", "t-*", "pids.events"))
		for _, f := range trees {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), "max ") && !strings.Contains(string(b), "max 0") {
				refused = true
			}
		}
		if refused {
			break // a fork was refused: the sessions are at a limit
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session did not reach its limit (%d tasks)", current())
		}
	}
	t.Logf("sessions' tasks: %d", current())
	// A busy daemon: 40 threads at once, and calls.
	var ready, release sync.WaitGroup
	release.Add(1)
	for i := 0; i < 40; i++ {
		ready.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			release.Wait()
		}()
	}
	ready.Wait()
	release.Done()
	for i := 0; i < 5; i++ {
		if out, err := run("ok", "echo "+strconv.Itoa(i)); err != nil || out != strconv.Itoa(i)+"\n" {
			t.Errorf("ok while the sessions are at their limit: %q %v", out, err)
		}
	}
	if _, err := c.Kill(context.Background(), false, "bomb"); err != nil {
		t.Fatalf("kill bomb: %v", err)
	}
	if out, err := run("fresh", "echo fresh"); err != nil || out != "fresh\n" {
		t.Errorf("a new session after the kill: %q %v", out, err)
	}
}
