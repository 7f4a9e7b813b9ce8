//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestRunLimitsRefusedClearly: where a controller is not delegated (the
// hybrid layout of these machines), --memory, --cpus and --pids are a
// start failure (125) that names the controller and how to get it, and
// --isolation pgroup with a limit is refused; nothing runs.
func TestRunLimitsRefusedClearly(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := testproc.TempDir(t)
	base, err := contain.CgroupBase()
	if err != nil {
		t.Skipf("no usable cgroup: %v", err)
	}
	avail, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	ran := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct{ controller, flag, value string }{
		{"memory", "--memory", "64MiB"}, {"memory", "--memory-high", "64MiB"}, {"cpu", "--cpus", "0.5"}, {"pids", "--pids", "64"},
	} {
		if strings.Contains(" "+string(avail)+" ", " "+tc.controller+" ") {
			continue
		}
		var stderr strings.Builder
		c := cli(t, mark, state, "run", tc.flag, tc.value, "--", "touch", ran)
		c.Stderr = &stderr
		err := c.Run()
		if code := exitCode(err); code != 125 {
			t.Fatalf("%s without the %s controller: exit %d, want 125; %s", tc.flag, tc.controller, code, stderr.String())
		}
		for _, want := range []string{"cgroup v2 " + tc.controller + " controller is not delegated", "Delegate=", "systemd-run --user --scope -p Delegate=yes"} {
			if !strings.Contains(stderr.String(), want) {
				t.Fatalf("%s: stderr does not say %q: %s", tc.flag, want, stderr.String())
			}
		}
		if strings.Contains(stderr.String(), "--isolation pgroup") {
			t.Fatalf("%s: advises pgroup, which cannot limit: %s", tc.flag, stderr.String())
		}
	}
	var stderr strings.Builder
	c := cli(t, mark, state, "run", "--isolation", "pgroup", "--pids", "64", "--", "touch", ran)
	c.Stderr = &stderr
	if code := exitCode(c.Run()); code != 125 || !strings.Contains(stderr.String(), "pgroup isolation cannot enforce them") {
		t.Fatalf("--isolation pgroup --pids: exit %d; %s", code, stderr.String())
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a command ran although its limits could not be set")
	}
	for _, bad := range [][]string{{"--memory", "lots"}, {"--memory", "0"}, {"--cpus", "-1"}, {"--pids", "-3"}} {
		c := cli(t, mark, state, append(append([]string{"run"}, bad...), "--", "true")...)
		if code := exitCode(c.Run()); code != 2 {
			t.Errorf("%v: exit %d, want a usage error (2)", bad, code)
		}
	}
}

// TestRunResultAccounting: --result has the numbers that were measured
// and says why the others are absent.
func TestRunResultAccounting(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := testproc.TempDir(t)
	for _, iso := range []string{"cgroup", "pgroup"} {
		if iso == "cgroup" {
			if _, err := contain.CgroupBase(); err != nil {
				continue
			}
		}
		out, err := cli(t, mark, state, "run", "--isolation", iso, "--result", "-", "--", "true").Output()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s: %v: %s", iso, err, out)
		}
		if iso == "pgroup" {
			if m["accounting"] != "pgroup isolation" || m["cpu_user_ms"] != nil || m["memory_peak_bytes"] != nil {
				t.Fatalf("pgroup: %s", out)
			}
			continue
		}
		if _, ok := m["cpu_user_ms"]; !ok {
			t.Fatalf("cgroup: no cpu_user_ms: %s", out)
		}
		_, peak := m["memory_peak_bytes"]
		if !peak && !strings.Contains(m["accounting"].(string), "memory controller not delegated") {
			t.Fatalf("cgroup: memory_peak_bytes absent without a reason: %s", out)
		}
	}
}

func TestExitForOOM(t *testing.T) {
	peak := int64(50 << 20)
	res := &corral.Result{Outcome: corral.OutcomeOOM, ExitCode: -1, Signal: 9, MemoryPeakBytes: &peak}
	err := exitForRun(res, nil, 0, true)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 137 || !strings.Contains(ee.msg, "OOM killer") {
		t.Fatalf("oom: %#v", err)
	}
}
