//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/testproc"
)

// runCLI runs corral with args and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, mark, state string, args ...string) (string, string, int) {
	t.Helper()
	return runCaptured(cli(t, mark, state, args...))
}

func TestRunBareNumbersAreSeconds(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	for _, tc := range []struct {
		args []string
		want int
		min  time.Duration
	}{
		{[]string{"--timeout", "1", "--", "sleep", "30"}, 124, 900 * time.Millisecond},
		{[]string{"--timeout", "0.3", "--", "sleep", "30"}, 124, 250 * time.Millisecond},
		{[]string{"--timeout", "1.5", "--grace", "0.2", "--", "sh", "-c", "trap '' TERM; sleep 30"}, 124, 1600 * time.Millisecond},
		{[]string{"--drain", "1", "--timeout", "2", "--", "true"}, 0, 0},
	} {
		t0 := time.Now()
		_, errs, rc := runCLI(t, mark, state, append([]string{"run", "--no-record"}, tc.args...)...)
		took := time.Since(t0)
		if rc != tc.want || took < tc.min || took > tc.min+8*time.Second {
			t.Errorf("corral run %q: exit %d after %v (%s); want %d after at least %v", tc.args, rc, took, errs, tc.want, tc.min)
		}
	}
	if _, errs, rc := runCLI(t, mark, state, "run", "--timeout", "1x", "--", "true"); rc != 2 || !strings.Contains(errs, "seconds") {
		t.Errorf("--timeout 1x: exit %d, %q; want a usage error", rc, errs)
	}
}

func TestRunResultToStdout(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	out, errs, rc := runCLI(t, mark, state, "run", "--no-record", "--result", "-", "--", "sh", "-c", "echo one; echo two")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if rc != 0 || len(lines) != 3 || lines[0] != "one" || lines[1] != "two" {
		t.Fatalf("exit %d, stdout %q, stderr %q: want the output, then one JSON line", rc, out, errs)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &r); err != nil || r["outcome"] != "exited" {
		t.Fatalf("last line %q: %v", lines[2], err)
	}
	if _, err := os.Stat(filepath.Join(state, "-")); err == nil {
		t.Fatal("a file named - was written")
	}
}

func TestRunResultToDevStdoutKeepsTheOutput(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	outPath := filepath.Join(state, "out.txt")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := cli(t, mark, state, "run", "--no-record", "--result", "/dev/stdout", "--", "sh", "-c", "echo first-line; echo second-line")
	c.Stdout = f
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Run(); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	b, _ := os.ReadFile(outPath)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || lines[0] != "first-line" || lines[1] != "second-line" || !strings.HasPrefix(lines[2], "{") {
		t.Fatalf("out.txt is %q: want the command's two lines, then the JSON", b)
	}
}

// The command's own exit status 2 is not a usage error of corral's.
func TestRunExitTwoGetsNoUsageHint(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	defer full.Close()
	c := cli(t, mark, state, "run", "--no-record", "--", "sh", "-c", "echo x; exit 2")
	c.Stdout = full
	var errb bytes.Buffer
	c.Stderr = &errb
	rc := exitCode(c.Run())
	if rc != 2 || !strings.Contains(errb.String(), "writing output") || strings.Contains(errb.String(), "--help") {
		t.Fatalf("exit %d, stderr %q: want 2 and the output error without a usage hint", rc, errb.String())
	}
	if _, errs, rc := runCLI(t, mark, state, "run", "--bogus"); rc != 2 || !strings.Contains(errs, "--help") {
		t.Fatalf("a real usage error: exit %d, %q", rc, errs)
	}
}

// A reader that goes away is no error of corral's to report: plain tools
// stay silent on EPIPE.
func TestRunSilentWhenTheReaderGoesAway(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	c := cli(t, mark, state, "run", "--no-record", "--", "sh", "-c", "echo a; sleep 0.5; echo b; echo c")
	out, errb := startPiped(t, c)
	buf := make([]byte, 2)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	out.Close()
	rc := exitCode(c.Wait())
	if errb.Len() != 0 {
		t.Fatalf("exit %d, stderr %q: want silence", rc, errb.String())
	}
}

func TestCLIVersionAndHelp(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	out, errs, rc := runCLI(t, mark, state, "--version")
	if rc != 0 || !strings.HasPrefix(out, "corral ") || !strings.Contains(out, "go1.") {
		t.Fatalf("--version: exit %d, %q %q", rc, out, errs)
	}
	out, _, rc = runCLI(t, mark, state, "--help")
	for _, want := range []string{"Examples:", "Exit status:", "124", "CORRAL_STATE_DIR", "CORRAL_ISOLATION", "CORRAL_CGROUP_ROOT", "XDG_STATE_HOME"} {
		if rc != 0 || !strings.Contains(out, want) {
			t.Errorf("--help (exit %d) lacks %q", rc, want)
		}
	}
}

func TestCLIWithoutADaemon(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	out, errs, rc := runCLI(t, mark, state, "daemon", "stop")
	if rc != 0 || !strings.Contains(out, "no daemon was running") {
		t.Errorf("daemon stop without a daemon: exit %d, %q %q; want 0 and a word", rc, out, errs)
	}
	out, _, rc = runCLI(t, mark, state, "daemon", "status", "--json")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil || st["running"] != false || rc != 3 {
		t.Errorf("daemon status --json without a daemon: exit %d, %q (%v); want JSON running:false and 3", rc, out, err)
	}
	out, errs, rc = runCLI(t, mark, state, "kill", "nonexist")
	if rc != 1 || !strings.Contains(errs, "no such session") {
		t.Errorf("kill nonexist: exit %d, %q %q", rc, out, errs)
	}
	if _, err := os.Stat(filepath.Join(state, "daemon.pid")); err == nil {
		t.Fatal("kill nonexist started a daemon")
	}

	// With a daemon: stop says what it did, status --json says running.
	e := newDaemonEnvAt(t, t.TempDir())
	if _, rc := e.exec("s1", "true"); rc != 0 {
		t.Fatal("exec failed")
	}
	out, _, rc = e.run("daemon", "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st["running"] != true || rc != 0 {
		t.Errorf("daemon status --json: exit %d, %q", rc, out)
	}
	out, errs, rc = e.run("daemon", "stop")
	if rc != 0 || !strings.Contains(out, "stopped the daemon") {
		t.Errorf("daemon stop: exit %d, %q %q", rc, out, errs)
	}
	// A recorded session with no daemon: kill starts one to kill it.
	out, errs, rc = e.run("kill", "s1")
	if rc != 0 || !strings.Contains(out, "killed s1") {
		t.Errorf("kill of a recorded session with the daemon stopped: exit %d, %q %q", rc, out, errs)
	}
}

// A script without "#!" runs with /bin/sh, as under timeout, env and xargs.
func TestRunScriptWithoutShebang(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	script := filepath.Join(state, "noshebang")
	if err := os.WriteFile(script, []byte("echo \"ran $0 with $# args: $1 $2\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, iso := range []string{"pgroup", "auto"} {
		out, errs, rc := runCLI(t, mark, state, "run", "--no-record", "--isolation", iso, "--", script, "a b", "c")
		if rc != 3 || out != "ran "+script+" with 2 args: a b c\n" {
			t.Errorf("--isolation %s: exit %d, stdout %q, stderr %q; want 3 and the script's line", iso, rc, out, errs)
		}
	}
}

// startPiped starts c with its stdout on a pipe, which it returns, and
// its stderr gathered in a buffer.
func startPiped(t *testing.T, c *exec.Cmd) (io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	errb := new(bytes.Buffer)
	c.Stderr = errb
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return out, errb
}

// trapScript reports which signal its shell got first, then exits 0.
const trapScript = `trap 'echo got INT; exit 0' INT; trap 'echo got TERM; exit 0' TERM; trap 'echo got HUP; exit 0' HUP; echo ready; while :; do sleep 0.05; done`

// runUntilReady starts corral with args, waits for the command's "ready"
// line, calls then, and returns the rest of stdout and the exit code.
func runUntilReady(t *testing.T, mark, state string, then func(*exec.Cmd), args ...string) (string, int) {
	t.Helper()
	c := cli(t, mark, state, args...)
	out, errb := startPiped(t, c)
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("first line %q (%v); stderr %q", line, err, errb.String())
	}
	then(c)
	rest, _ := io.ReadAll(r)
	return string(rest), exitCode(c.Wait())
}

func TestRunForwardsTheSignalItGot(t *testing.T) {
	mark := testproc.Guard(t, 90*time.Second)
	state := t.TempDir()
	for _, iso := range []string{"pgroup", "auto"} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM} {
			out, rc := runUntilReady(t, mark, state, func(c *exec.Cmd) { c.Process.Signal(sig) },
				"run", "--no-record", "--isolation", iso, "--", "sh", "-c", trapScript)
			want := "got " + strings.TrimPrefix(unix.SignalName(sig), "SIG") + "\n"
			if out != want || rc != 128+int(sig) {
				t.Errorf("%s: %v to corral: the command printed %q, exit %d; want %q and %d", iso, sig, out, rc, want, 128+int(sig))
			}
		}
	}
	// Background jobs of a non-interactive shell ignore SIGINT: once the
	// root has exited, what is left gets SIGTERM, not the whole grace.
	for _, iso := range []string{"pgroup", "auto"} {
		var t0 time.Time
		_, rc := runUntilReady(t, mark, state, func(c *exec.Cmd) { t0 = time.Now(); c.Process.Signal(syscall.SIGINT) },
			"run", "--no-record", "--isolation", iso, "--grace", "30", "--", "sh", "-c", "sleep 60 & echo ready; wait")
		if took := time.Since(t0); rc != 130 || took > 5*time.Second {
			t.Errorf("%s: SIGINT to a shell with a background job: exit %d after %v; want 130 long before the 30 s grace", iso, rc, took)
		}
	}
	// Python's KeyboardInterrupt runs, as under a terminal's Ctrl-C.
	if _, err := exec.LookPath("python3"); err == nil {
		py := "import time\ntry:\n    print('ready', flush=True)\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    print('KeyboardInterrupt handled', flush=True)\n"
		out, rc := runUntilReady(t, mark, state, func(c *exec.Cmd) { c.Process.Signal(syscall.SIGINT) },
			"run", "--no-record", "--", "python3", "-c", py)
		if out != "KeyboardInterrupt handled\n" || rc != 130 {
			t.Errorf("python: printed %q, exit %d", out, rc)
		}
	}
}

func TestRunTimeoutSignal(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	for _, tc := range []struct{ flag, want string }{
		{"INT", "got INT\n"}, {"sighup", "got HUP\n"}, {"1", "got HUP\n"}, {"TERM", "got TERM\n"},
	} {
		// The timeout counts from the start: the shell must have set its
		// traps by then, or the signal's default action kills it and it
		// prints nothing. 0.3 s was not always enough under load; the
		// cases run at once so that the generous bound costs it once.
		t.Run(tc.flag, func(t *testing.T) {
			t.Parallel()
			out, rc := runUntilReady(t, mark, state, func(*exec.Cmd) {},
				"run", "--no-record", "--timeout", "3", "--signal", tc.flag, "--", "sh", "-c", trapScript)
			if out != tc.want || rc != 124 {
				t.Errorf("--signal %s: printed %q, exit %d; want %q and 124", tc.flag, out, rc, tc.want)
			}
		})
	}
	if _, errs, rc := runCLI(t, mark, state, "run", "--signal", "NOPE", "--", "true"); rc != 2 || !strings.Contains(errs, "NOPE") {
		t.Errorf("--signal NOPE: exit %d, %q", rc, errs)
	}
}

// The result counts what corral stopped whatever the reason: a timeout
// here, a cancel (a signal to corral), or the root's exit.
func TestRunCountsWhatItStopped(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	kids := "for i in 1 2 3 4 5; do sleep 30 & done; echo ready; wait"
	for _, iso := range []string{"pgroup", "auto"} {
		for _, how := range []string{"timeout", "signal", "exit"} {
			res := filepath.Join(state, iso+how+".json")
			args := []string{"run", "--no-record", "--isolation", iso, "--result", res}
			script := kids
			then := func(*exec.Cmd) {}
			switch how {
			case "timeout":
				args = append(args, "--timeout", "1")
			case "signal":
				then = func(c *exec.Cmd) { c.Process.Signal(syscall.SIGTERM) }
			case "exit":
				script = "for i in 1 2 3 4 5; do sleep 30 & done; echo ready; sleep 0.3"
			}
			runUntilReady(t, mark, state, then, append(args, "--", "sh", "-c", script)...)
			var r map[string]any
			b, _ := os.ReadFile(res)
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%s %s: %s: %v", iso, how, b, err)
			}
			wantAll := 6.0
			if how == "exit" {
				wantAll = 5
			}
			if r["descendants_killed"] != 5.0 || r["processes_stopped"] != wantAll {
				t.Errorf("%s %s: descendants_killed %v, processes_stopped %v; want 5 and %v", iso, how, r["descendants_killed"], r["processes_stopped"], wantAll)
			}
		}
	}
}

func TestExecWordsReachTheCommandAsGiven(t *testing.T) {
	e := newDaemonEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--", "printf", `[%s]\n`, "a b", "c"}, "[a b]\n[c]\n"},
		{[]string{"--", "printf", "%s|", "it's", "$HOME", "*", "a;b", "", "`x`"}, "it's|$HOME|*|a;b||`x`|"},
		{[]string{"--", "echo one && echo two"}, "one\ntwo\n"}, // one word: shell code
		{[]string{"-c", "echo three; echo four"}, "three\nfour\n"},
	} {
		out, errs, rc := e.run(append([]string{"exec", "-s", "w"}, tc.args...)...)
		if rc != 0 || out != tc.want {
			t.Errorf("exec %q: exit %d, %q (%s); want %q", tc.args, rc, out, errs, tc.want)
		}
	}
	// rm "my file" removes that file, not "my" and "file".
	dir := t.TempDir()
	for _, n := range []string{"my file", "my", "file"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	if _, errs, rc := e.run("exec", "-s", "w", "--cwd", dir, "--", "rm", "my file"); rc != 0 {
		t.Fatalf("rm: %d %s", rc, errs)
	}
	for n, want := range map[string]bool{"my file": false, "my": true, "file": true} {
		if _, err := os.Stat(filepath.Join(dir, n)); (err == nil) != want {
			t.Errorf("after rm \"my file\": %q exists %v, want %v", n, err == nil, want)
		}
	}
	// Code longer than one argument may be (128 KiB) comes from a file.
	var b strings.Builder
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&b, "x%d=%d\n", i, i) // about 250 KiB
	}
	b.WriteString("echo \"$x19999\"\n")
	script := filepath.Join(dir, "long.sh")
	os.WriteFile(script, []byte(b.String()), 0o644)
	if out, errs, rc := e.run("exec", "-s", "w", "-f", script); rc != 0 || out != "19999\n" {
		t.Errorf("exec -f (%d bytes): exit %d, %q %s", b.Len(), rc, out, errs)
	}
	if _, errs, rc := e.run("exec", "-s", "w", "-c", "true", "--", "true"); rc != 2 || !strings.Contains(errs, "one of") {
		t.Errorf("-c with words: exit %d, %q", rc, errs)
	}
}

func TestExecGraceSignalAndResult(t *testing.T) {
	e := newDaemonEnv(t)
	// A 1 s timeout on a command that ignores TERM took 1 s + the
	// session's 5 s grace; --grace 0.3 makes it 1.3 s.
	t0 := time.Now()
	_, errs, rc := e.run("exec", "-s", "g", "--timeout", "1", "--grace", "0.3", "--", "trap '' TERM; sleep 30")
	if took := time.Since(t0); rc != 124 || took > 4*time.Second {
		t.Errorf("--grace 0.3: exit %d after %v (%s); want 124 well before the default grace", rc, took, errs)
	}
	// --signal is the first signal of a timeout, in a session and in a
	// oneshot.
	inner := "sh -c " + shellQuote(trapScript)
	for _, args := range [][]string{{"-s", "g"}, {"--oneshot"}} {
		out, errs, rc := e.run(append(append([]string{"exec"}, args...), "--timeout", "0.5", "--signal", "INT", "--", inner)...)
		if rc != 124 || out != "ready\ngot INT\n" {
			t.Errorf("exec %q --signal INT: exit %d, %q (%s); want 124 and the INT trap", args, rc, out, errs)
		}
	}
	// --result - writes the JSON after the output, with the tree's counts.
	out, errs, rc := e.run("exec", "-s", "g", "--timeout", "0.5", "--result", "-", "--", "sleep 30 & sleep 30 & echo ready; wait")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var r map[string]any
	if rc != 124 || len(lines) != 2 || lines[0] != "ready" || json.Unmarshal([]byte(lines[1]), &r) != nil || r["outcome"] != "timeout" {
		t.Fatalf("exec --result -: exit %d, %q (%s)", rc, out, errs)
	}
	if n, _ := r["processes_stopped"].(float64); n < 3 {
		t.Errorf("processes_stopped %v: want at least the shell and two sleeps", r["processes_stopped"])
	}
}

// A SIGINT to corral exec reaches the command as SIGINT, in a session and
// in a oneshot.
func TestExecForwardsTheSignalItGot(t *testing.T) {
	e := newDaemonEnv(t)
	inner := "sh -c " + shellQuote(trapScript)
	for _, args := range [][]string{{"-s", "f"}, {"--oneshot"}} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
			out, rc := runUntilReady(t, e.mark, e.state, func(c *exec.Cmd) { c.Process.Signal(sig) },
				append(append([]string{"exec"}, args...), "--", inner)...)
			want := "got " + strings.TrimPrefix(unix.SignalName(sig), "SIG") + "\n"
			if out != want || rc != 128+int(sig) {
				t.Errorf("exec %q, %v to corral: printed %q, exit %d; want %q and %d", args, sig, out, rc, want, 128+int(sig))
			}
		}
	}
}

// Messages read as sentences: no Go values ([1 2], <nil>).
func TestMessagesPrintNoGoValues(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	_, errs, rc := runCLI(t, mark, state, "run", "--no-record", "--keep-detached", "--drain", "200ms", "--", "sh", "-c", "sleep 10 & sleep 10 & echo x")
	if rc != 123 || !regexp.MustCompile(`^corral: processes \d+ and \d+ held stdout/stderr`).MatchString(errs) {
		t.Errorf("exit %d, stderr %q: want the pids written as words", rc, errs)
	}
	e := newDaemonEnv(t)
	e.exec("m", "true")
	if _, errs, rc := e.run("kill", "m"); rc != 0 {
		t.Fatalf("kill: %d %s", rc, errs)
	}
	b, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
	if bytes.Contains(b, []byte("<nil>")) || !bytes.Contains(b, []byte("session killed")) {
		t.Errorf("daemon.log: %s", b)
	}
}

// Completion offers the session names, and never starts a daemon.
func TestCompletionOffersSessionNames(t *testing.T) {
	e := newDaemonEnv(t)
	out, errs, rc := e.run("__complete", "kill", "")
	if rc != 0 || strings.Contains(out, "alpha") {
		t.Fatalf("no daemon: exit %d, %q %q", rc, out, errs)
	}
	if _, err := os.Stat(filepath.Join(e.state, "daemon.pid")); err == nil {
		t.Fatal("completion started a daemon")
	}
	e.exec("alpha", "true")
	e.exec("beta", "true")
	for _, tc := range []struct {
		args      []string
		wantAlpha bool
	}{{[]string{"kill", ""}, true}, {[]string{"exec", "-s", ""}, true}, {[]string{"kill", "alpha", ""}, false}} {
		args := tc.args
		out, errs, rc := e.run(append([]string{"__complete"}, args...)...)
		names := map[string]bool{}
		for _, l := range strings.Split(out, "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				names[l] = true
			}
		}
		if rc != 0 || !names["beta"] || names["alpha"] != tc.wantAlpha {
			t.Errorf("__complete %q: exit %d, %q %q", args, rc, out, errs)
		}
	}
}
