//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/mcpserver"
)

// TestExecLimitsRefusedClearly: where the controllers are not delegated
// (these machines), corral exec with --memory, --cpus or --pids creates
// nothing, runs nothing, exits 125 and names the controller and how to
// get it; on an existing session it changes nothing and says so; bad
// values are usage errors. A command's --result carries its accounting
// (CPU measured, the rest absent with the reason), and ls --json says why
// memory and pids are not shown. The MCP exec tool refuses the same way
// and its reply carries the accounting.
func TestExecLimitsRefusedClearly(t *testing.T) {
	base, err := contain.CgroupBase()
	if err != nil {
		t.Skipf("no usable cgroup: %v", err)
	}
	avail, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if strings.Contains(string(avail), "memory") || strings.Contains(string(avail), "pids") {
		t.Skip("the controllers are available here: nothing to refuse (the VM tests enforce them)")
	}
	e := newDaemonEnv(t)
	ran := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct{ controller, flag, value string }{
		{"memory", "--memory", "64MiB"}, {"pids", "--pids", "32"},
	} {
		_, errs, rc := e.run("exec", "-s", "lim", tc.flag, tc.value, "--", "touch "+ran)
		if rc != 125 || !strings.Contains(errs, "cgroup v2 "+tc.controller+" controller is not delegated") || !strings.Contains(errs, "Delegate=") {
			t.Fatalf("exec %s %s: exit %d, %s", tc.flag, tc.value, rc, errs)
		}
	}
	if _, ok := e.ls()["lim"]; ok {
		t.Fatal("a session was created although its limits were refused")
	}
	if out, rc := e.exec("lim", "echo made"); rc != 0 || out != "made\n" {
		t.Fatalf("the session without limits: %q %d", out, rc)
	}
	_, errs, rc := e.run("exec", "-s", "lim", "--memory", "64MiB", "--", "touch "+ran)
	if rc != 125 || !strings.Contains(errs, "limits were not changed, and the command did not run") {
		t.Fatalf("a change refused: exit %d, %s", rc, errs)
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a command ran although its limits were refused")
	}
	for _, bad := range [][]string{{"--memory", "lots"}, {"--memory", "0"}, {"--cpus", "-1"}, {"--cpus", "0.001"}, {"--pids", "x"}} {
		if _, _, rc := e.run(append(append([]string{"exec", "-s", "lim"}, bad...), "--", "true")...); rc != 2 {
			t.Errorf("%v: exit %d, want a usage error (2)", bad, rc)
		}
	}
	out, errs, rc := e.run("exec", "-s", "lim", "--result", "-", "--", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	var res map[string]any
	if rc != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("--result: %d %q %s", rc, out, errs)
	}
	if u, ok := res["cpu_user_ms"].(float64); !ok || u <= 0 || res["memory_peak_bytes"] != nil ||
		!strings.Contains(res["accounting"].(string), "memory controller not delegated") {
		t.Fatalf("--result accounting: %s", out)
	}
	lsOut, _, _ := e.run("ls", "--json")
	var list []map[string]any
	json.Unmarshal([]byte(lsOut), &list)
	if len(list) != 1 || list[0]["memory_bytes"] != nil || !strings.Contains(list[0]["accounting"].(string), "memory controller not delegated") {
		t.Fatalf("ls --json: %s", lsOut)
	}

	cs, _ := mcpClient(t, e)
	var o mcpserver.ExecOutput
	call(t, cs, "exec", map[string]any{"command": "touch " + ran, "session": "agent", "memory": "64MiB"}, &o)
	if o.Outcome != "start_failed" || !strings.Contains(o.Error, "memory controller is not delegated") {
		t.Fatalf("mcp exec with memory: %+v", o)
	}
	if r := call(t, cs, "exec", map[string]any{"command": "true", "memory": "lots"}, nil); !r.IsError || !strings.Contains(text(r), "memory") {
		t.Fatalf("mcp exec with a bad memory: %s", text(r))
	}
	o = execOK(t, cs, map[string]any{"command": "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done", "session": "agent"})
	if o.Outcome != "exited" || o.CPUUserMs == nil || *o.CPUUserMs <= 0 || o.MemoryPeakBytes != nil || !strings.Contains(o.Accounting, "not delegated") {
		t.Fatalf("mcp exec accounting: %+v", o)
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a command ran although its limits were refused")
	}
}
