package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/testproc"
)

// asUser is a corral invocation as a throwaway user that never had a
// cgroup delegated to it, on a machine where root has used corral (so a
// root-owned "corral" cgroup exists under the cgroup2 mount, if there is
// one).
type asUser struct {
	t          *testing.T
	u          testproc.User
	mark, home string
	bin        string
}

func newAsUser(t *testing.T) *asUser {
	u := testproc.NewUser(t)
	mark := testproc.Guard(t, 90*time.Second)
	// Root uses corral first: this makes root's cgroup parent, where
	// root may.
	if base, err := contain.CgroupBase(); err == nil {
		t.Logf("root's cgroup parent: %s", base)
	}
	home := u.Dir(t)
	bin := filepath.Join(filepath.Dir(home), "corral") // the binary the user may run
	b, err := os.ReadFile(corralBin)
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	a := &asUser{t: t, u: u, mark: mark, home: home, bin: bin}
	t.Cleanup(func() {
		a.run(nil, "kill", "--all")
		a.run(nil, "daemon", "stop")
	})
	return a
}

// run runs corral as the user with env added to a minimal environment, and
// returns its stdout, stderr and exit code.
func (a *asUser) run(env []string, args ...string) (string, string, int) {
	c := exec.Command(a.bin, args...)
	c.Env = append([]string{a.mark, "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + a.home, "SHELL=/bin/sh",
		"CORRAL_STATE_DIR=" + filepath.Join(a.home, "state")}, env...)
	c.Dir = a.home
	c.SysProcAttr = a.u.Credential()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	return out.String(), errb.String(), exitCode(err)
}

// resultIsolation runs 'corral run --result' as the user and returns the
// isolation its result names.
func (a *asUser) resultIsolation(env []string, args ...string) string {
	a.t.Helper()
	res := filepath.Join(a.home, "result.json")
	_, errs, rc := a.run(env, append([]string{"run", "--result", res}, append(args, "--", "true")...)...)
	if rc != 0 {
		a.t.Fatalf("corral run %v as uid %d: exit %d: %s", args, a.u.Uid, rc, errs)
	}
	var r struct{ Isolation string }
	b, _ := os.ReadFile(res)
	if err := json.Unmarshal(b, &r); err != nil {
		a.t.Fatalf("result %q: %v", b, err)
	}
	return r.Isolation
}

// wantIsolationHint checks a failure of the isolation: exit 125 (not 126:
// the command is not at fault), and a message that says what to do.
func wantIsolationHint(t *testing.T, what string, rc int, errs string, hints ...string) {
	t.Helper()
	if rc != 125 {
		t.Errorf("%s: exit %d, want 125: %s", what, rc, errs)
	}
	for _, h := range append([]string{"isolation not available", "Delegate=yes", "CORRAL_CGROUP_ROOT"}, hints...) {
		if !strings.Contains(errs, h) {
			t.Errorf("%s: the message does not say %q: %s", what, h, errs)
		}
	}
}

// TestRunAsUnprivilegedUser: a user with no cgroup of its own gets pgroup
// from auto, and a clear exit 125 from an explicit cgroup, by flag or by
// CORRAL_ISOLATION, with nothing run. (auto used to pick cgroup because
// root's corral cgroup exists, and the run failed with 126 "command cannot
// be executed".)
func TestRunAsUnprivilegedUser(t *testing.T) {
	a := newAsUser(t)
	if got := a.resultIsolation(nil); got != "pgroup" {
		t.Errorf("auto picked %q for uid %d, want pgroup", got, a.u.Uid)
	}
	if got := a.resultIsolation([]string{"CORRAL_ISOLATION=auto"}); got != "pgroup" {
		t.Errorf("CORRAL_ISOLATION=auto picked %q for uid %d, want pgroup", got, a.u.Uid)
	}
	ran := filepath.Join(a.home, "ran")
	_, errs, rc := a.run(nil, "run", "--isolation", "cgroup", "--", "touch", ran)
	wantIsolationHint(t, "--isolation cgroup", rc, errs, "--isolation pgroup")
	_, errs, rc = a.run([]string{"CORRAL_ISOLATION=cgroup"}, "run", "--", "touch", ran)
	wantIsolationHint(t, "CORRAL_ISOLATION=cgroup", rc, errs, "--isolation pgroup")
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran although its isolation failed")
	}
	// The flag wins over the environment.
	if got := a.resultIsolation([]string{"CORRAL_ISOLATION=cgroup"}, "--isolation", "pgroup"); got != "pgroup" {
		t.Errorf("--isolation pgroup under CORRAL_ISOLATION=cgroup gave %q", got)
	}
}

// TestExecAsUnprivilegedUser: the daemon a user without a cgroup starts
// contains its sessions with pgroup and says so; one started with
// CORRAL_ISOLATION=cgroup fails each command with 125 and what to do.
func TestExecAsUnprivilegedUser(t *testing.T) {
	a := newAsUser(t)
	if out, errs, rc := a.run(nil, "exec", "-s", "s1", "--", "echo hi"); rc != 0 || out != "hi\n" {
		t.Fatalf("exec as uid %d: %q, exit %d: %s", a.u.Uid, out, rc, errs)
	}
	if out, errs, rc := a.run(nil, "daemon", "status"); rc != 0 || !strings.Contains(out, "isolation pgroup") {
		t.Fatalf("daemon status: %q, exit %d: %s", out, rc, errs)
	}
	if _, _, rc := a.run(nil, "daemon", "stop"); rc != 0 {
		t.Fatalf("daemon stop: exit %d", rc)
	}
	cg := []string{"CORRAL_ISOLATION=cgroup"}
	_, errs, rc := a.run(cg, "exec", "-s", "s2", "--", "echo hi")
	wantIsolationHint(t, "exec -s under a cgroup daemon", rc, errs, "pgroup isolation")
	_, errs, rc = a.run(cg, "exec", "--oneshot", "--", "echo hi")
	wantIsolationHint(t, "exec --oneshot under a cgroup daemon", rc, errs, "pgroup isolation")
}

// TestRunInADelegatedCgroup: a user to whom a cgroup was delegated (as
// systemd-run --user --scope -p Delegate=yes does: the cgroup and its
// cgroup.procs, cgroup.subtree_control and cgroup.threads chowned to the
// user, the user's process inside it) gets cgroup from auto, its trees in
// a "corral" cgroup below its own.
func TestRunInADelegatedCgroup(t *testing.T) {
	a := newAsUser(t)
	base, err := contain.CgroupBase()
	if err != nil {
		t.Skipf("root has no cgroup v2 to delegate from: %v", err)
	}
	deleg := filepath.Join(filepath.Dir(base), "corral-test-"+a.u.Name)
	if err := os.Mkdir(deleg, 0o755); err != nil {
		t.Skipf("cannot make a cgroup to delegate: %v", err)
	}
	t.Cleanup(func() {
		// Deepest first; the trees' cgroups are gone by now.
		for _, d := range []string{filepath.Join(deleg, "corral", "released"), filepath.Join(deleg, "corral"), deleg} {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				t.Errorf("remove %s: %v", d, err)
			}
		}
	})
	for _, p := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		if err := os.Chown(filepath.Join(deleg, p), a.u.Uid, a.u.Gid); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := syscall.Open(deleg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	res := filepath.Join(a.home, "result.json")
	c := exec.Command(a.bin, "run", "--result", res, "--", "true")
	c.Env = []string{a.mark, "PATH=/usr/bin:/bin", "HOME=" + a.home, "CORRAL_STATE_DIR=" + filepath.Join(a.home, "state")}
	c.Dir = a.home
	c.SysProcAttr = a.u.Credential()
	c.SysProcAttr.UseCgroupFD, c.SysProcAttr.CgroupFD = true, fd // born in the delegated cgroup
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("corral run in a delegated cgroup: %v: %s", err, out)
	}
	var r struct{ Isolation, Cgroup string }
	b, _ := os.ReadFile(res)
	if err := json.Unmarshal(b, &r); err != nil || r.Isolation != "cgroup" || !strings.HasPrefix(r.Cgroup, filepath.Join(deleg, "corral")+"/") {
		t.Fatalf("result %s (%v): want cgroup isolation below %s/corral", b, err, deleg)
	}
}
