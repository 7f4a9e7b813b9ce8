//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/testproc"
)

// benchBinary is the corral binary a whole-process benchmark runs: the one
// $CORRAL_BENCH_BIN names (another build, to compare), else this tree's,
// built static (CGO_ENABLED=0) as it ships.
func benchBinary(b *testing.B) (bin string, ours bool) {
	if bin := os.Getenv("CORRAL_BENCH_BIN"); bin != "" {
		return bin, false
	}
	bin = filepath.Join(b.TempDir(), "corral")
	c := exec.Command("go", "build", "-o", bin, ".")
	c.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := c.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v %s", err, out)
	}
	return bin, true
}

// median of the samples, in ms.
func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// BenchmarkExecRoundTrip: "true" in a warm session through the corral CLI
// (a whole process: corral exec -s bench -- true) and through the Go
// client from a warm process, against spawning "bash -c true" and against
// a tmux-driven shell (send-keys, then wait-for), timed in alternation in
// one run; medians and the ratios of issue 9's goals: exec/bash (goal
// <= 2.5) and tmux/exec (goal >= 2). CORRAL_BENCH_BIN runs another corral
// binary's CLI instead (the Go client is then not measured: it speaks this
// tree's protocol).
func BenchmarkExecRoundTrip(b *testing.B) {
	bin, ours := benchBinary(b)
	mark := "CORRAL_TEST_MARK=bench-roundtrip"
	state := b.TempDir()
	env := append(os.Environ(), mark, "CORRAL_STATE_DIR="+state)
	run := func(args ...string) {
		c := exec.Command(bin, args...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v %s", args, err, out)
		}
	}
	run("exec", "-s", "bench", "--", "true")
	defer func() { run("kill", "--all"); run("daemon", "stop") }()
	var cl *client.Client
	if ours {
		var err error
		if cl, err = client.Dial(context.Background(), state); err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
	}
	tmux := startTmux(b)
	defer tmux.stop()

	ctx := context.Background()
	var spawn, viaTmux, viaCLI, viaClient []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		exec.Command("bash", "-c", "true").Run()
		spawn = append(spawn, time.Since(t))
		t = time.Now()
		tmux.roundTrip(b)
		viaTmux = append(viaTmux, time.Since(t))
		t = time.Now()
		run("exec", "-s", "bench", "--", "true")
		viaCLI = append(viaCLI, time.Since(t))
		if cl != nil {
			t = time.Now()
			if _, err := cl.Exec(ctx, "bench", "true", client.ExecOptions{Env: env}); err != nil {
				b.Fatal(err)
			}
			viaClient = append(viaClient, time.Since(t))
		}
	}
	b.ReportMetric(median(spawn), "bash-c-ms")
	b.ReportMetric(median(viaTmux), "tmux-ms")
	b.ReportMetric(median(viaCLI), "corral-cli-ms")
	b.ReportMetric(median(viaCLI)/median(spawn), "cli/bash")
	b.ReportMetric(median(viaTmux)/median(viaCLI), "tmux/cli")
	if cl != nil {
		b.ReportMetric(median(viaClient), "go-client-ms")
		b.ReportMetric(median(viaClient)/median(spawn), "client/bash")
	}
}

type tmuxShell struct{ sock string }

func startTmux(b *testing.B) *tmuxShell {
	if _, err := exec.LookPath("tmux"); err != nil {
		b.Skip("no tmux")
	}
	t := &tmuxShell{sock: filepath.Join(b.TempDir(), "tmux.sock")}
	if out, err := exec.Command("tmux", "-S", t.sock, "new-session", "-d", "-s", "bench", "bash", "--norc").CombinedOutput(); err != nil {
		b.Fatalf("tmux: %v %s", err, out)
	}
	return t
}

func (t *tmuxShell) roundTrip(b *testing.B) {
	if err := exec.Command("tmux", "-S", t.sock, "send-keys", "-t", "bench", "true; tmux -S "+t.sock+" wait-for -S done", "Enter").Run(); err != nil {
		b.Fatal(err)
	}
	if err := exec.Command("tmux", "-S", t.sock, "wait-for", "done").Run(); err != nil {
		b.Fatal(err)
	}
}

func (t *tmuxShell) stop() { exec.Command("tmux", "-S", t.sock, "kill-server").Run() }

// pss reads a process's proportional set size in KiB.
func pss(pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "Pss:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	return 0
}

// BenchmarkIdleSessions: 200 idle sessions. Reports what each costs: the
// daemon's growth per session (corral's whole cost: there is no process
// per session but the session's own shell), the shell's PSS apart, the
// same figure for a tmux server holding 200 sessions in the same run, and
// the latency of corral ls. Goals: corral's own cost under 1 MiB per idle
// session beyond its shell; ls under 50 ms.
func BenchmarkIdleSessions(b *testing.B) {
	const n = 200
	mark := testproc.MarkerName + "=bench-idle"
	state := b.TempDir()
	env := append(os.Environ(), mark, "CORRAL_STATE_DIR="+state)
	cl := func(args ...string) (string, error) {
		c := exec.Command(corralBin, args...)
		c.Env = env
		out, err := c.Output()
		return string(out), err
	}
	cl("exec", "-s", "s0", "--", "true")
	defer func() { cl("kill", "--all"); cl("daemon", "stop") }()
	dpidB, _ := os.ReadFile(filepath.Join(state, "daemon.pid"))
	dpid, _ := strconv.Atoi(strings.TrimSpace(string(dpidB)))
	c, err := client.Dial(context.Background(), state)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	daemonBefore := pss(dpid)
	for i := 1; i < n; i++ {
		if _, err := c.Exec(context.Background(), fmt.Sprintf("s%d", i), "true", client.ExecOptions{Env: env}); err != nil {
			b.Fatal(err)
		}
	}
	sessions, _ := c.List(context.Background())
	time.Sleep(500 * time.Millisecond) // let everything go idle
	var shellKiB, threads int
	for _, s := range sessions {
		shellKiB += pss(s.ShellPid)
	}
	daemonAfter := pss(dpid)
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", dpid)); err == nil {
		threads = len(ents)
	}
	b.ResetTimer()
	var lsTime time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := cl("ls"); err != nil {
			b.Fatal(err)
		}
		lsTime += time.Since(t)
	}
	b.StopTimer()
	tmuxKiB := tmuxPerSession(b, n)
	b.ReportMetric(float64(len(sessions)), "sessions")
	b.ReportMetric(float64(daemonAfter-daemonBefore)/float64(len(sessions)-1), "corral-KiB/session")
	b.ReportMetric(float64(shellKiB)/float64(len(sessions)), "shell-PSS-KiB/session")
	b.ReportMetric(tmuxKiB, "tmux-server-KiB/session")
	b.ReportMetric(float64(threads), "daemon-threads")
	b.ReportMetric(float64(lsTime.Microseconds())/float64(b.N)/1000, "ls-ms")
}

// tmuxPerSession is the growth of a tmux server's PSS per session, over n
// sessions running sh (0 without tmux). The server is ours: it is stopped
// through its own socket.
func tmuxPerSession(b *testing.B, n int) float64 {
	if _, err := exec.LookPath("tmux"); err != nil {
		return 0
	}
	sock := filepath.Join(b.TempDir(), "tmux.sock")
	tm := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).Output()
		if err != nil {
			b.Fatalf("tmux %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	tm("new-session", "-d", "-s", "t0", "sh")
	defer exec.Command("tmux", "-S", sock, "kill-server").Run()
	server, _ := strconv.Atoi(tm("display-message", "-p", "#{pid}"))
	time.Sleep(200 * time.Millisecond)
	before := pss(server)
	for i := 1; i < n; i++ {
		tm("new-session", "-d", "-s", fmt.Sprintf("t%d", i), "sh")
	}
	time.Sleep(500 * time.Millisecond)
	return float64(pss(server)-before) / float64(n-1)
}
