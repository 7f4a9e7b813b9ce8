package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// TestRunHonoursCorralIsolation: corral run takes its isolation from
// CORRAL_ISOLATION, as the daemon does, unless --isolation is given.
func TestRunHonoursCorralIsolation(t *testing.T) {
	matrix.Isolations(t, func(t *testing.T, iso string) {
		e := newDaemonEnv(t) // for its marker and state; no daemon is started
		res := filepath.Join(e.state, "result.json")
		c := cli(t, e.mark, e.state, "run", "--result", res, "--", "true")
		c.Env = append(c.Env, "CORRAL_ISOLATION="+iso)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("CORRAL_ISOLATION=%s corral run: %v: %s", iso, err, out)
		}
		var r struct{ Isolation string }
		b, _ := os.ReadFile(res)
		if err := json.Unmarshal(b, &r); err != nil || r.Isolation != iso {
			t.Fatalf("CORRAL_ISOLATION=%s: result %s (%v)", iso, b, err)
		}
	})
	e := newDaemonEnv(t)
	c := cli(t, e.mark, e.state, "run", "--", "true")
	c.Env = append(c.Env, "CORRAL_ISOLATION=chroot")
	if out, err := c.CombinedOutput(); exitCode(err) != 2 || !strings.Contains(string(out), "CORRAL_ISOLATION") {
		t.Fatalf("CORRAL_ISOLATION=chroot: exit %d: %s", exitCode(err), out)
	}
}

// TestExecRefusesAnotherIsolation: a client whose CORRAL_ISOLATION differs
// from the running daemon's is told so, and nothing runs: its command would
// be contained otherwise than it asked.
func TestExecRefusesAnotherIsolation(t *testing.T) {
	e := newDaemonEnv(t)
	t.Setenv("CORRAL_ISOLATION", "pgroup") // the daemon the first exec starts
	if out, rc := e.exec("s", "echo hi"); rc != 0 || out != "hi\n" {
		t.Fatalf("first exec: %q, exit %d", out, rc)
	}
	if out, _, rc := e.run("daemon", "status"); rc != 0 || !strings.Contains(out, "isolation pgroup") {
		t.Fatalf("daemon status: %q, exit %d", out, rc)
	}
	ran := filepath.Join(e.state, "ran")
	t.Setenv("CORRAL_ISOLATION", "cgroup")
	_, errs, rc := e.run("exec", "-s", "s", "--", "touch "+ran)
	if rc != 125 || !strings.Contains(errs, "CORRAL_ISOLATION=cgroup, but the running daemon") ||
		!strings.Contains(errs, "with pgroup") || !strings.Contains(errs, "corral daemon stop") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("exec asking for cgroup of a pgroup daemon: exit %d: %q", rc, errs)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran under another isolation than asked")
	}
	for _, same := range []string{"pgroup", "auto", ""} {
		t.Setenv("CORRAL_ISOLATION", same)
		if out, rc := e.exec("s", "echo ok"); rc != 0 || out != "ok\n" {
			t.Fatalf("CORRAL_ISOLATION=%q: %q, exit %d", same, out, rc)
		}
	}
}
