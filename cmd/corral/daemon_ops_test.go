//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// opsDaemon is a `corral daemon --health 127.0.0.1:0 --log-format json`
// process of a test: its JSON log lines as they come, and its health
// address.
type opsDaemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	err    error // Wait's, once exited is closed

	mu    sync.Mutex
	lines []map[string]any
	bad   []string // lines that were not one JSON object
}

// startOpsDaemon starts the daemon of e's state directory in the
// foreground with the given extra flags and waits for its health address.
func startOpsDaemon(t *testing.T, e *daemonEnv, flags ...string) *opsDaemon {
	t.Helper()
	return startDaemonArgs(t, e, append([]string{"daemon", "--health", "127.0.0.1:0", "--log-format", "json"}, flags...))
}

// startDaemonArgs is startOpsDaemon with the whole command line: it must
// log JSON and serve its health.
func startDaemonArgs(t *testing.T, e *daemonEnv, args []string) *opsDaemon {
	t.Helper()
	c := cli(t, e.mark, e.state, args...)
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	d := &opsDaemon{t: t, cmd: c, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				d.mu.Lock()
				d.bad = append(d.bad, sc.Text())
				d.mu.Unlock()
				continue
			}
			d.mu.Lock()
			d.lines = append(d.lines, m)
			d.mu.Unlock()
			if m["msg"] == "serving health and metrics" {
				addr <- m["addr"].(string)
			}
		}
		d.err = c.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
			return
		default:
		}
		c.Process.Signal(syscall.SIGTERM) // ours: started here
		select {
		case <-d.exited:
		case <-time.After(40 * time.Second):
			syscall.Kill(c.Process.Pid, syscall.SIGKILL) // ours: started here
			<-d.exited
		}
	})
	select {
	case d.addr = <-addr:
	case <-d.exited:
		t.Fatalf("the daemon exited before serving its health: %v\n%s", d.err, d.log())
	case <-time.After(20 * time.Second):
		t.Fatalf("no health address logged within 20s\n%s", d.log())
	}
	return d
}

func (d *opsDaemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, l := range d.lines {
		fmt.Fprintln(&b, l)
	}
	for _, l := range d.bad {
		fmt.Fprintln(&b, "NOT JSON:", l)
	}
	return b.String()
}

// logged reports whether a line with msg has been logged.
func (d *opsDaemon) logged(msg string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if l["msg"] == msg {
			return true
		}
	}
	return false
}

// get GETs path of the health server: its status and body.
func (d *opsDaemon) get(path string) (int, string) {
	d.t.Helper()
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + d.addr + path)
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// metrics scrapes /metrics and parses it as the Prometheus text format
// (version 0.0.4): every sample line is `name{label="value",...} value`,
// its family declared by HELP and TYPE lines first. It returns the
// samples keyed by name and labels as written.
func (d *opsDaemon) metrics() map[string]float64 {
	d.t.Helper()
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + d.addr + "/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		d.t.Errorf("metrics Content-Type %q", ct)
	}
	typed := map[string]string{}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			switch typ {
			case "counter", "gauge", "histogram", "summary", "untyped":
			default:
				d.t.Errorf("metrics: bad TYPE line %q", line)
			}
			typed[name] = typ
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			d.t.Fatalf("metrics: not a sample: %q", line)
		}
		key, val := line[:i], line[i+1:]
		name := key
		if j := strings.IndexByte(key, '{'); j >= 0 {
			name = key[:j]
			if !strings.HasSuffix(key, "}") {
				d.t.Errorf("metrics: unclosed labels: %q", line)
			}
			for _, l := range strings.Split(key[j+1:len(key)-1], ",") {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
					d.t.Errorf("metrics: bad label %q in %q", l, line)
				}
			}
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && typed[base] == "histogram" {
				name = base
			}
		}
		if typed[name] == "" {
			d.t.Errorf("metrics: sample %q before its TYPE", line)
		}
		if typed[name] == "counter" && !strings.HasSuffix(name, "_total") {
			d.t.Errorf("metrics: counter %s not named _total", name)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil && val != "NaN" {
			d.t.Errorf("metrics: bad value in %q: %v", line, err)
		}
		if val == "NaN" {
			v = math.NaN()
		}
		if _, dup := out[key]; dup {
			d.t.Errorf("metrics: %s twice", key)
		}
		out[key] = v
	}
	return out
}

// await polls cond every 10ms for up to d and fails with what.
func await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

// TestDaemonHealthMetricsJSONLog runs a daemon with --health and --log-format
// json, runs commands of every kind through the CLI, and checks the
// health endpoints, the metrics' values (parsed from the text format) and
// that every log line is one JSON object with time, level and msg; then a
// second daemon takes the session over and reports its recovery.
func TestDaemonHealthMetricsJSONLog(t *testing.T) {
	e := newDaemonEnv(t)
	d := startOpsDaemon(t, e)
	if code, body := d.get("/healthz"); code != 200 || !strings.Contains(body, `"alive":true`) {
		t.Fatalf("healthz: %d %s", code, body)
	}
	// Its health is served from before Serve accepts: ready soon after.
	await(t, 10*time.Second, "readyz never 200", func() bool {
		code, body := d.get("/readyz")
		return code == 200 && strings.Contains(body, `"ready":true`)
	})
	if code, _ := d.get("/nothing"); code != 404 {
		t.Errorf("an unknown path: %d, want 404", code)
	}

	for _, c := range []struct {
		args []string
		rc   int
	}{
		{[]string{"exec", "-s", "a", "--", "true"}, 0},
		{[]string{"exec", "-s", "a", "--", "(exit 3)"}, 3},
		{[]string{"exec", "-s", "b", "--timeout", "0.2", "--", "sleep 30"}, 124},
		{[]string{"exec", "--oneshot", "--", "true"}, 0},
		{[]string{"exec", "--oneshot", "--", "false"}, 1},
		{[]string{"exec", "-s", "a", "--cwd", "/nonexistent-dir", "--", "true"}, -2},
	} {
		_, errs, rc := e.run(c.args...)
		if c.rc >= 0 && rc != c.rc {
			t.Fatalf("%v: exit %d, want %d: %s", c.args, rc, c.rc, errs)
		}
	}
	// A command its client stops (SIGINT, as Ctrl-C): cancelled.
	cl := cli(t, e.mark, e.state, "exec", "-s", "c", "--", "sleep 30")
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	await(t, 20*time.Second, "session c never got busy", func() bool {
		return d.metrics()["corral_sessions_busy"] == 1
	})
	cl.Process.Signal(syscall.SIGINT) // ours: started here
	if rc := exitCode(cl.Wait()); rc != 128+int(syscall.SIGINT) {
		t.Fatalf("the interrupted exec exited %d", rc)
	}

	m := d.metrics()
	t.Logf("metrics: %v", m)
	want := map[string]float64{
		`corral_sessions{state="up"}`:                                  1,
		`corral_sessions{state="down"}`:                                2, // b and c, reset when stopped
		`corral_sessions_busy`:                                         0,
		`corral_commands_total{kind="session",outcome="exited"}`:       2,
		`corral_commands_total{kind="session",outcome="timeout"}`:      1,
		`corral_commands_total{kind="session",outcome="cancelled"}`:    1,
		`corral_commands_total{kind="session",outcome="start_failed"}`: 1,
		`corral_commands_total{kind="oneshot",outcome="exited"}`:       2,
		`corral_commands_failed_total{kind="session"}`:                 4, // exit 3, timeout, cancelled, bad cwd
		`corral_commands_failed_total{kind="oneshot"}`:                 1,
		`corral_commands_cancelled_total{kind="session"}`:              1,
		`corral_commands_cancelled_total{kind="oneshot"}`:              0,
		`corral_ready`:    1,
		`corral_draining`: 0,
		`corral_connections_refused_stopping_total`: 0,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if r := m["corral_recovery_seconds"]; math.IsNaN(r) || r <= 0 || r > 10 {
		t.Errorf("corral_recovery_seconds = %v, want a small positive figure", r)
	}
	if m[`corral_build_info{version="(devel)",revision="",goversion="`+goVersion(t)+`"}`] != 1 {
		t.Errorf("no build info sample in %v", m)
	}
	if up := e.ls()["a"]; up.State != "up" {
		t.Fatalf("session a: %+v", up)
	}
	shell := e.ls()["a"].ShellPid

	// SIGTERM with nothing running: the daemon exits at once, 0.
	d.cmd.Process.Signal(syscall.SIGTERM) // ours: started here
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not exit within 20s of SIGTERM with no call under way")
	}
	if d.err != nil {
		t.Errorf("the daemon's exit: %v", d.err)
	}
	d.mu.Lock()
	bad, lines := d.bad, d.lines
	d.mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("log lines that are not JSON objects: %q", bad)
	}
	for _, l := range lines {
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(l["time"])); err != nil || l["level"] == nil || l["msg"] == nil {
			t.Errorf("log line without time, level and msg: %v", l)
		}
	}
	for _, msg := range []string{"daemon starting", "shell started", "daemon stopping; no call under way", "daemon stopped; every session's shell goes on"} {
		if !d.logged(msg) {
			t.Errorf("no %q line in the log:\n%s", msg, d.log())
		}
	}

	// The next daemon takes session a's shell over: ready once it has.
	d2 := startOpsDaemon(t, e)
	await(t, 20*time.Second, "the second daemon never became ready", func() bool {
		code, _ := d2.get("/readyz")
		return code == 200
	})
	m = d2.metrics()
	if m[`corral_sessions{state="up"}`] != 1 || m[`corral_sessions{state="recovering"}`] != 0 {
		t.Errorf("after the take-over: %v", m)
	}
	if r := m["corral_recovery_seconds"]; math.IsNaN(r) || r <= 0 {
		t.Errorf("corral_recovery_seconds = %v after a take-over", r)
	}
	if got := e.ls()["a"].ShellPid; got != shell {
		t.Errorf("session a's shell is %d after the restart, was %d", got, shell)
	}
	d2.cmd.Process.Signal(syscall.SIGTERM) // ours: started here
	<-d2.exited
}

// goVersion is the toolchain's version: that of this test binary, built
// by the toolchain that built corral (asking go itself fails where there
// is none, in the VM of .ci/run).
func goVersion(t *testing.T) string { return runtime.Version() }

// TestDaemonDrainOnSIGTERM: a SIGTERM lets the running command finish (its
// client gets its output and exit code), readiness says draining, a new
// call is refused with "the daemon is stopping", the daemon exits, and the
// session's shell outlives it.
func TestDaemonDrainOnSIGTERM(t *testing.T) {
	e := newDaemonEnv(t)
	d := startOpsDaemon(t, e, "--drain-timeout", "30")
	if _, rc := e.exec("a", "true"); rc != 0 {
		t.Fatal("the session did not start")
	}
	shell := e.ls()["a"].ShellPid
	running := cli(t, e.mark, e.state, "exec", "-s", "a", "--", "sleep 2; echo finished; (exit 7)")
	var out strings.Builder
	running.Stdout = &out
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	await(t, 20*time.Second, "session a never got busy", func() bool {
		return d.metrics()["corral_sessions_busy"] == 1
	})
	termAt := time.Now()
	d.cmd.Process.Signal(syscall.SIGTERM) // ours: started here
	await(t, 5*time.Second, "readyz never said draining", func() bool {
		code, body := d.get("/readyz")
		return code == 503 && strings.Contains(body, "draining")
	})
	if code, _ := d.get("/healthz"); code != 200 {
		t.Errorf("healthz while draining: %d, want 200 (the process is alive)", code)
	}
	_, errs, rc := e.run("exec", "-s", "b", "--", "echo should-not-run")
	if rc == 0 || !strings.Contains(errs, "the daemon is stopping") {
		t.Errorf("a new exec while draining: exit %d, %q; want a refusal that says the daemon is stopping", rc, errs)
	}
	if m := d.metrics(); m["corral_connections_refused_stopping_total"] < 1 || m["corral_draining"] != 1 {
		t.Errorf("while draining: %v", m)
	}
	if rc := exitCode(running.Wait()); rc != 7 || out.String() != "finished\n" {
		t.Errorf("the running command: exit %d, output %q; want 7, finished", rc, out.String())
	}
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not exit within 20s of its last call")
	}
	took := time.Since(termAt)
	t.Logf("SIGTERM to exit with a 2s command running: %v", took)
	if d.err != nil {
		t.Errorf("the daemon's exit: %v", d.err)
	}
	if !d.logged("drained: every call under way ended") {
		t.Errorf("no drained line:\n%s", d.log())
	}
	if !alive(shell) {
		t.Fatalf("session a's shell %d died with the daemon", shell)
	}
	if s := e.ls()["a"]; s.ShellPid != shell || s.State != "up" {
		t.Errorf("after the drain: %+v, want shell %d up", s, shell)
	}
	if _, ok := e.ls()["b"]; ok {
		t.Error("session b was created by a call the draining daemon refused")
	}
}

// TestDaemonDrainBounds: the drain waits no longer than --drain-timeout,
// and a second SIGTERM stops the wait at once; each time the command goes
// on in its session's shell.
func TestDaemonDrainBounds(t *testing.T) {
	for _, c := range []struct {
		name   string
		flags  []string
		second bool
		log    string
	}{
		{"bound", []string{"--drain-timeout", "1"}, false, "drain bound passed: the commands still running go on in their sessions (their callers get an error), oneshots are stopped"},
		{"second-sigterm", []string{"--drain-timeout", "120"}, true, "drain cut short (a second signal): the commands still running go on in their sessions (their callers get an error), oneshots are stopped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newDaemonEnv(t)
			d := startOpsDaemon(t, e, c.flags...)
			marker := e.state + "/went-on"
			running := cli(t, e.mark, e.state, "exec", "-s", "a", "--", "sleep 4; touch "+marker)
			if err := running.Start(); err != nil {
				t.Fatal(err)
			}
			await(t, 20*time.Second, "session a never got busy", func() bool {
				return d.metrics()["corral_sessions_busy"] == 1
			})
			termAt := time.Now()
			d.cmd.Process.Signal(syscall.SIGTERM) // ours: started here
			if c.second {
				await(t, 5*time.Second, "no draining line", func() bool {
					return d.logged("daemon stopping: draining the calls under way; new calls are refused")
				})
				d.cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case <-d.exited:
			case <-time.After(15 * time.Second):
				t.Fatal("the daemon did not exit within 15s")
			}
			took := time.Since(termAt)
			t.Logf("SIGTERM to exit: %v", took)
			if took > 3500*time.Millisecond {
				t.Errorf("the daemon took %v to exit, past its bound (the command ran 4s)", took)
			}
			if !d.logged(c.log) {
				t.Errorf("no %q line:\n%s", c.log, d.log())
			}
			if rc := exitCode(running.Wait()); rc == 0 {
				t.Error("the client whose command outlived the drain exited 0")
			}
			// The command goes on in its shell: the next daemon finds
			// the session busy, then up once it has finished.
			await(t, 20*time.Second, "the command did not go on after the daemon left", func() bool {
				return fileExists(marker)
			})
		})
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestDaemonMetricsCountReapedOrphans: a tree whose corral was SIGKILLed
// is reaped by the next daemon's start-up recovery, and /metrics counts it.
func TestDaemonMetricsCountReapedOrphans(t *testing.T) {
	e := newDaemonEnv(t)
	tree := startOrphan(t, e.mark, e.state, "auto")
	d := startOpsDaemon(t, e)
	await(t, 20*time.Second, "the orphaned tree was not reaped:\n"+d.log(), func() bool {
		for _, pid := range tree {
			if testproc.Alive(pid) {
				return false
			}
		}
		return true
	})
	await(t, 5*time.Second, "readyz never 200", func() bool {
		code, _ := d.get("/readyz")
		return code == 200
	})
	if m := d.metrics(); m["corral_orphans_reaped_total"] != 1 {
		t.Errorf("corral_orphans_reaped_total = %v after reaping the tree %v", m["corral_orphans_reaped_total"], tree)
	}
	if !d.logged("orphaned tree killed") {
		t.Errorf("no orphaned tree killed line:\n%s", d.log())
	}
}
