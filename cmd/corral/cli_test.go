//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// corralBin is the corral binary built once for these tests.
var corralBin string

func TestMain(m *testing.M) {
	if sock := os.Getenv("CORRAL_PEER_PROBE"); sock != "" {
		os.Exit(peerProbe(sock))
	}
	dir, err := os.MkdirTemp("", "corral-cli-test")
	if err != nil {
		panic(err)
	}
	corralBin = filepath.Join(dir, "corral")
	if bin := os.Getenv("CORRAL_TEST_CORRAL"); bin != "" {
		// A prebuilt binary, where there is no go to build one: the VM
		// of .ci/run.
		corralBin = bin
	} else if out, err := exec.Command("go", "build", "-o", corralBin, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cli prepares a corral invocation with the test's marker and its own
// state directory.
func cli(t *testing.T, mark, state string, args ...string) *exec.Cmd {
	c := exec.Command(corralBin, args...)
	c.Env = append(testproc.Env(mark), "CORRAL_STATE_DIR="+state)
	return c
}

// runCaptured runs c and returns its stdout, its stderr and its exit code
// (128+N for signal N).
func runCaptured(c *exec.Cmd) (string, string, int) {
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	return out.String(), errb.String(), exitCode(err)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

func TestRunClosedStdoutEndsCommandWithSIGPIPE(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	res := filepath.Join(state, "r.json")
	c := cli(t, mark, state, "run", "--result", res, "--", "yes")
	out, errb := startPiped(t, c)
	buf := make([]byte, 4)
	if _, err := out.Read(buf); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	out.Close() // as `| head -c 4` would
	if got := exitCode(c.Wait()); got != 128+int(syscall.SIGPIPE) {
		t.Fatalf("exit %d, want %d (yes killed by SIGPIPE)", got, 128+int(syscall.SIGPIPE))
	}
	var r map[string]any
	b, _ := os.ReadFile(res)
	if err := json.Unmarshal(b, &r); err != nil || r["outcome"] != "signaled" || r["signal"] != float64(syscall.SIGPIPE) {
		t.Fatalf("result %s (%v)", b, err)
	}
}

func TestRunExitCodes(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	ran := filepath.Join(state, "ran")
	notCgroup := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  string
		want int
		msg  string
	}{
		{args: []string{"--", "sh", "-c", "exit 7"}, want: 7},
		{args: []string{"--", "true"}, want: 0},
		{args: []string{"--", "sh", "-c", "kill -USR1 $$"}, want: 128 + int(syscall.SIGUSR1)},
		{args: []string{"--timeout", "100ms", "--", "sleep", "10"}, want: 124, msg: "timed out"},
		{args: []string{"--", "corral-no-such-command"}, want: 127, msg: "not found"},
		{args: []string{"--", "/etc/passwd"}, want: 126, msg: "cannot be executed"},
		{args: []string{"--max-output", "1KiB", "--", "yes"}, want: 122, msg: "output limit"},
		{args: []string{"--keep-detached", "--drain", "200ms", "--", "sh", "-c", "sleep 10 & echo x"}, want: 123, msg: "held stdout"},
		{args: []string{"--bogus", "--", "touch", ran}, want: 2, msg: "unknown flag"},
		{args: []string{"--timeout", "soon", "--", "touch", ran}, want: 2, msg: "invalid argument"},
		{args: []string{"--max-output", "lots", "--", "touch", ran}, want: 2, msg: "--max-output"},
		{args: []string{"--isolation", "chroot", "--", "touch", ran}, want: 2, msg: "--isolation"},
		{args: []string{"--drain", "0s", "--", "touch", ran}, want: 2, msg: "--drain"},
		{args: []string{}, want: 2, msg: "requires at least 1 arg"},
		{args: []string{"--isolation", "cgroup", "--", "touch", ran}, env: "CORRAL_CGROUP_ROOT=" + notCgroup, want: 125, msg: "isolation not available"},
		{args: []string{"--result", filepath.Join(state, "no", "such", "dir"), "--", "touch", ran}, want: 125, msg: "--result"},
	} {
		c := cli(t, mark, state, append([]string{"run"}, tc.args...)...)
		if tc.env != "" {
			c.Env = append(c.Env, tc.env)
		}
		var errb bytes.Buffer
		c.Stderr = &errb
		err := c.Run()
		if got := exitCode(err); got != tc.want || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("corral run %q: exit %d, stderr %q; want %d and %q", tc.args, got, errb.String(), tc.want, tc.msg)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatalf("corral run %q ran the command although it was refused", tc.args)
		}
	}
	if recs, _ := filepath.Glob(filepath.Join(state, "runs", "*.json")); len(recs) > 0 {
		t.Fatalf("records left behind: %v", recs)
	}
}

func TestRunResultFile(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	res := filepath.Join(state, "result.json")
	c := cli(t, mark, state, "run", "--result", res, "--", "sh", "-c", "printf abc; printf de >&2; exit 4")
	if got := exitCode(c.Run()); got != 4 {
		t.Fatalf("exit %d", got)
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	for _, k := range []string{"outcome", "exit_code", "signal", "pid", "pgid", "cgroup", "isolation", "started_at",
		"ended_at", "duration_ms", "first_output_ms", "stdout_bytes", "stderr_bytes"} {
		if _, ok := r[k]; !ok {
			t.Errorf("result lacks %q: %s", k, b)
		}
	}
	if r["outcome"] != "exited" || r["exit_code"] != float64(4) || r["stdout_bytes"] != float64(3) || r["stderr_bytes"] != float64(2) {
		t.Fatalf("result %s", b)
	}
	if r["first_output_ms"] == nil || r["pid"] == float64(0) {
		t.Fatalf("result %s", b)
	}
}

func TestRunStreamsAndPassesStdin(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	c := cli(t, mark, state, "run", "--", "sh", "-c", "read line; echo got:$line; sleep 30")
	c.Stdin = strings.NewReader("hello\n")
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := out.Read(buf)
	if err != nil || string(buf[:n]) != "got:hello\n" {
		t.Fatalf("first output %q, %v (not streamed while the command runs?)", buf[:n], err)
	}
	c.Process.Signal(syscall.SIGTERM)
	if got := exitCode(c.Wait()); got != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d after SIGTERM", got)
	}
}

func TestRunSignalsStopTheTree(t *testing.T) {
	for _, iso := range matrix.AllIsolations() {
		t.Run(iso, func(t *testing.T) {
			matrix.NeedIsolation(t, iso)
			mark := testproc.Guard(t, 60*time.Second)
			state := t.TempDir()
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
				c := cli(t, mark, state, "run", "--isolation", iso, "--", "sh", "-c", "sleep 60 & setsid sleep 60 & echo up; wait")
				out, _ := c.StdoutPipe()
				c.Start()
				out.Read(make([]byte, 8))
				c.Process.Signal(sig)
				if got := exitCode(c.Wait()); got != 128+int(sig) {
					t.Fatalf("%v: exit %d", sig, got)
				}
				if left := testproc.Survivors(mark); len(left) > 0 {
					t.Fatalf("%v: survivors %v", sig, left)
				}
			}
			// A second SIGINT skips the grace period of a tree that
			// ignores the first (forwarded as SIGINT).
			c := cli(t, mark, state, "run", "--isolation", iso, "--grace", "60s", "--", "sh", "-c", "trap '' INT TERM; echo up; sleep 60")
			out, _ := c.StdoutPipe()
			c.Start()
			out.Read(make([]byte, 8))
			start := time.Now()
			c.Process.Signal(syscall.SIGINT)
			time.Sleep(200 * time.Millisecond)
			c.Process.Signal(syscall.SIGINT)
			if got := exitCode(c.Wait()); got != 130 {
				t.Fatalf("double SIGINT: exit %d", got)
			}
			if el := time.Since(start); el > 10*time.Second {
				t.Fatalf("second SIGINT did not kill at once: %v", el)
			}
		})
	}
}

// startOrphan runs a tree under corral, SIGKILLs corral once the tree is
// up, and returns the tree's pids.
func startOrphan(t *testing.T, mark, state, iso string) []int {
	t.Helper()
	c := cli(t, mark, state, "run", "--isolation", iso, "--", "sh", "-c", "sleep 60 & setsid sleep 60 & echo up; wait")
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	out.Read(make([]byte, 8))
	time.Sleep(50 * time.Millisecond) // let setsid exec
	c.Process.Kill()
	c.Wait()
	left := testproc.Survivors(mark)
	if len(left) < 3 {
		t.Fatalf("expected the orphaned tree (sh and two sleeps) alive, found %v", left)
	}
	return left
}

func TestReapAfterCorralIsKilled(t *testing.T) {
	for _, iso := range matrix.AllIsolations() {
		t.Run(iso, func(t *testing.T) {
			matrix.NeedIsolation(t, iso)
			mark := testproc.Guard(t, 60*time.Second)
			state := t.TempDir()
			tree := startOrphan(t, mark, state, iso)

			dry := cli(t, mark, state, "reap", "--dry-run", "--json")
			b, err := dry.Output()
			if err != nil {
				t.Fatalf("reap --dry-run: %v", err)
			}
			var rep struct {
				Trees []struct {
					Action string `json:"action"`
					Pids   []int  `json:"pids"`
				} `json:"trees"`
			}
			if err := json.Unmarshal(b, &rep); err != nil || len(rep.Trees) != 1 || rep.Trees[0].Action != "would_kill" || len(rep.Trees[0].Pids) != len(tree) {
				t.Fatalf("dry run: %s (%v); tree %v", b, err, tree)
			}
			if left := testproc.Survivors(mark); len(left) != len(tree) {
				t.Fatalf("dry run killed something: %v -> %v", tree, left)
			}

			if out, err := cli(t, mark, state, "reap").CombinedOutput(); err != nil || !strings.Contains(string(out), "killed") {
				t.Fatalf("reap: %v\n%s", err, out)
			}
			if left := testproc.Survivors(mark); len(left) > 0 {
				t.Fatalf("reap left %v", left)
			}
			out, err := cli(t, mark, state, "reap", "--json").Output()
			if err != nil || !strings.Contains(string(out), `"trees": []`) {
				t.Fatalf("second reap: %v\n%s", err, out)
			}
		})
	}
}

func TestReapLeavesLiveOwnersAlone(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	c := cli(t, mark, state, "run", "--", "sh", "-c", "echo up; sleep 60")
	out, _ := c.StdoutPipe()
	c.Start()
	out.Read(make([]byte, 8))
	b, err := cli(t, mark, state, "reap", "--json").Output()
	if err != nil || !strings.Contains(string(b), `"owner_alive"`) {
		t.Fatalf("reap with a live owner: %v\n%s", err, b)
	}
	if left := testproc.Survivors(mark); len(left) < 2 {
		t.Fatalf("reap touched a live run: %v", left)
	}
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
}

// writeRecord writes a record by hand, as a crash or a tampered state
// directory could leave it.
func writeRecord(t *testing.T, state string, rec map[string]any) {
	t.Helper()
	os.MkdirAll(filepath.Join(state, "runs"), 0o700)
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(state, "runs", rec["id"].(string)+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReapNeverSignalsAForeignProcess(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	// A live process that is not corral's: started here, outside corral,
	// in its own group, without any tree marker.
	foreign := exec.Command("sleep", "60")
	foreign.Env = testproc.Env(mark)
	foreign.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := foreign.Start(); err != nil {
		t.Fatal(err)
	}
	defer foreign.Wait()
	defer foreign.Process.Kill()
	pid := foreign.Process.Pid
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	base := map[string]any{
		"version": 1, "owner_pid": 999999, "owner_start": 1, "boot_id": strings.TrimSpace(string(boot)),
		"marker": "CORRAL_TREE=feedfacefeedfacefeedfacefeedface", "argv": []string{"x"},
	}
	with := func(kv map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range kv {
			m[k] = v
		}
		return m
	}
	// Its pid as a recycled root: same pid and group, start time of the
	// process the record meant (long gone).
	writeRecord(t, state, with(map[string]any{"id": "recycled", "isolation": "pgroup", "pid": pid, "pgid": pid, "start_time": 1}))
	// A record pointing at a cgroup corral did not make.
	writeRecord(t, state, with(map[string]any{"id": "foreign-cgroup", "isolation": "cgroup", "pid": pid, "pgid": pid, "start_time": 1, "cgroup": "/sys/fs/cgroup"}))
	// A record from another boot.
	writeRecord(t, state, with(map[string]any{"id": "old-boot", "isolation": "pgroup", "pid": pid, "pgid": pid, "start_time": 1, "boot_id": "00000000-0000-0000-0000-000000000000"}))
	// Garbage.
	os.WriteFile(filepath.Join(state, "runs", "torn.json"), []byte(`{"version": 1, "id": "to`), 0o600)

	out, _ := cli(t, mark, state, "reap", "--json").Output()
	time.Sleep(100 * time.Millisecond)
	if !testproc.Alive(pid) {
		t.Fatalf("reap killed a foreign process:\n%s", out)
	}
	var rep struct {
		Trees []struct {
			Record struct{ ID string } `json:"record"`
			Action string              `json:"action"`
			Pids   []int               `json:"pids"`
		} `json:"trees"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	got := map[string]string{}
	for _, tr := range rep.Trees {
		got[tr.Record.ID] = tr.Action
		if len(tr.Pids) > 0 {
			t.Errorf("%s: claimed pids %v", tr.Record.ID, tr.Pids)
		}
	}
	if got["recycled"] != "gone" || got["foreign-cgroup"] != "failed" || got["old-boot"] != "gone" || len(rep.Errors) != 1 {
		t.Fatalf("actions %v, errors %v", got, rep.Errors)
	}
	if _, err := os.Stat(filepath.Join(state, "runs", "torn.json")); err != nil {
		t.Fatal("an unusable record was deleted")
	}
}

func TestRunOnFullDiskRunsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", state).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	defer unmountSoon(t, state)
	os.MkdirAll(filepath.Join(state, "runs"), 0o700)
	os.Chmod(state, 0o700)
	fill, _ := os.Create(filepath.Join(state, "fill"))
	fill.Write(make([]byte, 1<<20)) // fails part way: the disk is full
	fill.Close()
	ran := filepath.Join(t.TempDir(), "ran")
	c := cli(t, mark, state, "run", "--", "touch", ran)
	var errb bytes.Buffer
	c.Stderr = &errb
	if got := exitCode(c.Run()); got != 125 || !strings.Contains(errb.String(), "no space left") {
		t.Fatalf("exit %d, stderr %q", got, errb.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran although its record could not be written")
	}
}
