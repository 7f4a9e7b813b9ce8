//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// TestReapRefusesAForeignRoot: a run record forged from a genuine one (a
// corral run killed with its tree left) to name a live process this test
// started outside corral, with its real pid, start time and boot, as the
// leader of its own group with a second member, and the genuine record's
// marker and cgroup. corral reap must refuse it (failed, saying why, the
// record kept), signal neither foreign process nor touch the genuine
// tree; the genuine record is then still reaped.
func TestReapRefusesAForeignRoot(t *testing.T) {
	for _, iso := range matrix.AllIsolations() {
		t.Run(iso, func(t *testing.T) {
			matrix.NeedIsolation(t, iso)
			mark := testproc.Guard(t, 60*time.Second)
			state := t.TempDir()
			tree := startOrphan(t, mark, state, iso)
			runs := filepath.Join(state, "runs")
			files, _ := filepath.Glob(filepath.Join(runs, "*.json"))
			if len(files) != 1 {
				t.Fatalf("want the one record of the orphaned run, found %v", files)
			}
			raw, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			// The genuine record waits outside the store while the forged
			// one is reaped alone.
			aside := filepath.Join(state, "genuine.json.aside")
			if err := os.Rename(files[0], aside); err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal(raw, &rec); err != nil {
				t.Fatal(err)
			}

			leader, member := testproc.ForeignGroup(t, mark)
			st, err := proc.ReadStat(leader)
			if err != nil {
				t.Fatal(err)
			}
			rec["id"], rec["pid"], rec["pgid"], rec["start_time"] = "forged", leader, leader, st.StartTime
			writeRecord(t, state, rec)

			out, err := cli(t, mark, state, "reap", "--json").Output()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("reap of a refused record: %v, want exit status 1 (some trees could not be reaped)\n%s", err, out)
			}
			t.Logf("reap: %s", out)
			foreignUnsignalled(t, leader, member)
			var rep struct {
				Trees []struct {
					Action string `json:"action"`
					Pids   []int  `json:"pids"`
					Error  string `json:"error"`
				} `json:"trees"`
			}
			if err := json.Unmarshal(out, &rep); err != nil || len(rep.Trees) != 1 {
				t.Fatalf("reap: %s (%v)", out, err)
			}
			if r := rep.Trees[0]; r.Action != "failed" || len(r.Pids) != 0 || !strings.Contains(r.Error, "not a tree corral started") {
				t.Fatalf("forged record: %+v, want failed saying it is not a tree corral started", r)
			}
			if _, err := os.Stat(filepath.Join(runs, "forged.json")); err != nil {
				t.Fatalf("the refused record was not kept: %v", err)
			}
			if left := testproc.Survivors(mark); len(left) != len(tree)+2 {
				t.Fatalf("reap of the forged record touched the genuine tree %v: left %v", tree, left)
			}

			// The genuine record is still reaped; the foreign processes live on.
			os.Remove(filepath.Join(runs, "forged.json"))
			if err := os.Rename(aside, files[0]); err != nil {
				t.Fatal(err)
			}
			if out, err := cli(t, mark, state, "reap").CombinedOutput(); err != nil || !strings.Contains(string(out), "killed") {
				t.Fatalf("reap of the genuine record: %v\n%s", err, out)
			}
			for _, pid := range tree {
				if testproc.Alive(pid) {
					t.Fatalf("the genuine tree's process %d survived its reap", pid)
				}
			}
			if !testproc.Alive(leader) || !testproc.Alive(member) {
				t.Fatal("reap of the genuine record killed a foreign process")
			}
		})
	}
}

// TestDaemonRefusesAForgedShellRoot: a session record forged to name, as
// its held shell, a live process this test started outside corral, with
// its real pid, start time and boot and its own group (with a second
// member). The next daemon must not take it over (which, finding no
// FIFOs, would stop the "shell"'s tree): the session lists as broken,
// saying why, refuses commands, and goes with corral kill, with neither
// foreign process signalled; the name then works afresh.
func TestDaemonRefusesAForgedShellRoot(t *testing.T) {
	e := newDaemonEnv(t)
	e.exec("ok", "true")
	leader, member := testproc.ForeignGroup(t, e.mark)
	st, err := proc.ReadStat(leader)
	if err != nil {
		t.Fatal(err)
	}
	putRecord(t, e.state, &store.Session{Name: "forged", Shell: "/bin/sh", Cwd: "/", State: store.Up,
		Tree: &store.Shell{Identity: corral.Identity{Isolation: "pgroup", Pid: leader, Pgid: leader, StartTime: st.StartTime,
			BootID: bootID(t), Marker: "CORRAL_TREE=feedfacefeedfacefeedfacefeedface"}}})
	e.lsRecovered(30 * time.Second)
	foreignUnsignalled(t, leader, member)
	out, _, rc := e.run("ls", "--json")
	if rc != 0 {
		t.Fatalf("ls: %d", rc)
	}
	var list []map[string]any
	json.Unmarshal([]byte(out), &list)
	var forged map[string]any
	for _, s := range list {
		if s["name"] == "forged" {
			forged = s
		}
	}
	if forged == nil || forged["state"] != "broken" || !strings.Contains(fmt.Sprint(forged["reason"]), "not a tree corral started") {
		log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
		t.Fatalf("forged session listed as %v\ndaemon.log:\n%s", forged, log)
	}
	if _, errs, rc := e.run("exec", "-s", "forged", "--", "echo ran"); rc != 125 || !strings.Contains(errs, "broken") {
		t.Fatalf("exec on the forged session: exit %d, %q", rc, errs)
	}
	if _, errs, rc := e.run("kill", "forged"); rc != 0 {
		t.Fatalf("kill: %d %s", rc, errs)
	}
	foreignUnsignalled(t, leader, member)
	if out, rc := e.exec("forged", "echo fresh"); rc != 0 || out != "fresh\n" {
		t.Fatalf("after kill: %q %d", out, rc)
	}
	foreignUnsignalled(t, leader, member)
}

// foreignUnsignalled fails the test unless each of pids (sleeps started
// by startForeignGroup) is alive and not stopped, after a pause in which a
// signal sent would have been delivered.
func foreignUnsignalled(t *testing.T, pids ...int) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	for _, pid := range pids {
		st, err := proc.ReadStat(pid)
		if err != nil || st.Zombie() || st.State == 'T' || st.State == 't' {
			t.Fatalf("process %d that corral never started was signalled: %+v, %v", pid, st, err)
		}
	}
}
