//go:build linux

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// throwawayUser creates a system user for this test alone and removes it at
// cleanup; it skips the test unless it runs as root with useradd.
func throwawayUser(t *testing.T) (uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a throwaway user")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("no useradd")
	}
	var b [4]byte
	rand.Read(b[:])
	name := "crl" + hex.EncodeToString(b[:])
	if out, err := exec.Command("useradd", "-M", "-r", "-s", "/bin/false", name).CombinedOutput(); err != nil {
		t.Skipf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// tasksOf counts the tasks (threads) of uid's processes: what RLIMIT_NPROC
// counts.
func tasksOf(uid int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var ruid, threads int
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				ruid, _ = strconv.Atoi(strings.Fields(v)[0])
			}
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if ruid == uid {
			n += threads
		}
	}
	return n
}

// TestDaemonSurvivesASessionThatUsesUpNPROC: a daemon and its sessions run
// as one user under one RLIMIT_NPROC; a session forks until no process or
// thread of that user can be created. The daemon goes on serving many
// calls at once (it creates no thread it cannot: it made them at start),
// and kills the session.
func TestDaemonSurvivesASessionThatUsesUpNPROC(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("needs prlimit (util-linux)")
	}
	uid, gid := throwawayUser(t)
	const nproc = 200
	mark := testproc.Guard(t, 90*time.Second)
	top, err := os.MkdirTemp("", "corral-nproc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	os.Chmod(top, 0o755)
	state := filepath.Join(top, "state")
	os.Mkdir(state, 0o700)
	os.Chown(state, uid, gid)
	bin := filepath.Join(top, "corral")
	data, _ := os.ReadFile(corralBin)
	os.WriteFile(bin, data, 0o755)
	asUser := func(c *exec.Cmd) *exec.Cmd {
		c.Dir = "/"
		c.Env = append(testproc.Env(mark), "CORRAL_STATE_DIR="+state, "CORRAL_ISOLATION=pgroup", "SHELL=/bin/sh", "HOME=/")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		return c
	}
	run := func(args ...string) (string, string, int) {
		return runCaptured(asUser(exec.Command(bin, args...)))
	}
	logPath := filepath.Join(top, "daemon.log")
	logf, _ := os.Create(logPath)
	d := asUser(exec.Command(prlimit, "--nproc="+strconv.Itoa(nproc)+":"+strconv.Itoa(nproc), bin, "daemon"))
	d.Stdout, d.Stderr = logf, logf
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	var dead error // set once the daemon is found dead
	t.Cleanup(func() {
		select {
		case dead = <-exited:
		default:
		}
		if dead == nil {
			run("kill", "--all")
			run("daemon", "stop")
		} else {
			// No daemon to kill the session (a client would start one,
			// which could not start): its processes carry our marker.
			for _, pid := range testproc.Survivors(mark) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			d.Process.Kill()
			<-exited
		}
	})
	log := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(state, "corral.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start:\n%s", log())
		}
	}
	const n = 8
	for i := 0; i < n; i++ {
		if out, errs, rc := run("exec", "-s", "ok"+strconv.Itoa(i), "--", "echo up"); rc != 0 || out != "up\n" {
			t.Fatalf("ok%d: %q %q %d\n%s", i, out, errs, rc, log())
		}
	}
	// The session forks in the background until the user can have no
	// more tasks, and keeps trying.
	if _, errs, rc := run("exec", "-s", "bomb", "--", "(while :; do sleep 1000 & done) >/dev/null 2>&1 &"); rc != 0 {
		t.Fatalf("bomb: %d %s", rc, errs)
	}
	for deadline := time.Now().Add(30 * time.Second); tasksOf(uid) < nproc-10; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the session reached only %d of %d tasks", tasksOf(uid), nproc)
		}
	}
	t.Logf("user's tasks: %d (limit %d)", tasksOf(uid), nproc)
	// Many calls at once: listings, and commands in every other session.
	var wg sync.WaitGroup
	fails := make(chan string, 10*n)
	for round := 0; round < 3; round++ {
		for i := 0; i < n; i++ {
			wg.Add(2)
			go func(i int) {
				defer wg.Done()
				want := fmt.Sprintf("%d\n", i)
				if out, errs, rc := run("exec", "-s", "ok"+strconv.Itoa(i), "--", "echo "+strconv.Itoa(i)); rc != 0 || out != want {
					fails <- fmt.Sprintf("exec ok%d: %q %q %d", i, out, errs, rc)
				}
			}(i)
			go func() {
				defer wg.Done()
				if _, errs, rc := run("ls", "--json"); rc != 0 {
					fails <- fmt.Sprintf("ls: %d %q", rc, errs)
				}
			}()
		}
		wg.Wait()
	}
	close(fails)
	for f := range fails {
		t.Error(f)
	}
	select {
	case dead = <-exited:
		t.Fatalf("the daemon died (%v):\n%s", dead, log())
	default:
	}
	if _, errs, rc := run("kill", "bomb"); rc != 0 {
		t.Fatalf("kill bomb: %d %s\n%s", rc, errs, log())
	}
	if out, _, rc := run("exec", "-s", "ok0", "--", "echo after"); rc != 0 || out != "after\n" {
		t.Fatalf("after the kill: %q %d", out, rc)
	}
	if strings.Contains(log(), "pthread_create failed") || strings.Contains(log(), "fatal error") {
		t.Fatalf("daemon log:\n%s", log())
	}
}
