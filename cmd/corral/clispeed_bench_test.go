//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/testproc"
)

// BenchmarkCLISpeed times whole corral processes against baselines in the
// same run, as an agent or a CI script that calls the CLI once per command
// feels them: each op runs every command of the set once, in an order
// rotated per op, and the figures are medians of the per-command wall
// times (fork to reaped, as a caller's subprocess call sees it). It
// reports each median in ms and the ratios that issue 9 sets goals for:
//
//	run/timeout  corral run -- true     against timeout 10 true   (goal <= 2)
//	exec/bash    corral exec -s s -- true (a warm session) against bash -c true (goal <= 2.5)
//	tmux/exec    tmux send-keys + wait-for against corral exec (goal >= 2)
//	version/empty corral --version      against an empty Go program (goal <= 1.5)
//
// With CORRAL_CLISPEED_OLD=/path/to/another/corral, that binary's run and
// --version are timed in the same loop too (run-old, version-old), for a
// before/after from one run.
//
// corral is built here with CGO_ENABLED=0, as the README builds it, and
// only run as a program, so the figures hold whatever transport it uses to
// reach its daemon. Run it with enough ops for stable medians:
//
//	go test -run XXX -bench CLISpeed -benchtime 300x ./cmd/corral
func BenchmarkCLISpeed(b *testing.B) {
	mark := testproc.Guard(b, 10*time.Minute)
	bin := b.TempDir()
	corral := filepath.Join(bin, "corral")
	empty := filepath.Join(bin, "empty")
	build := func(out, pkg string, dir string) {
		c := exec.Command("go", "build", "-o", out, pkg)
		c.Dir = dir
		c.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := c.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, o)
		}
	}
	build(corral, ".", ".")
	src := filepath.Join(bin, "emptysrc")
	if err := os.Mkdir(src, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module empty\n\ngo 1.22\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	build(empty, ".", src)

	state := b.TempDir()
	env := append(testproc.Env(mark), "CORRAL_STATE_DIR="+state)
	run := func(args ...string) error {
		c := exec.Command(args[0], args[1:]...)
		c.Env = env
		return c.Run()
	}
	must := func(args ...string) {
		c := exec.Command(args[0], args[1:]...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	// The session is made warm (daemon started, shell running) before
	// timing; the daemon and its session go at the end.
	must(corral, "exec", "-s", "s", "--", "true")
	b.Cleanup(func() {
		run(corral, "kill", "--all")
		run(corral, "daemon", "stop")
	})

	type timed struct {
		name string
		run  func() error
		d    []time.Duration
	}
	cmds := []*timed{
		{name: "timeout", run: func() error { return run("timeout", "10", "true") }},
		{name: "run", run: func() error { return run(corral, "run", "--", "true") }},
		{name: "bash", run: func() error { return run("bash", "-c", "true") }},
		{name: "exec", run: func() error { return run(corral, "exec", "-s", "s", "--", "true") }},
		{name: "empty", run: func() error { return run(empty) }},
		{name: "version", run: func() error { return run(corral, "--version") }},
	}
	// CORRAL_CLISPEED_OLD names another corral binary (an older build, say)
	// to time in the same loop: its run and --version are reported beside
	// this one's, with the ratios new/old.
	old := os.Getenv("CORRAL_CLISPEED_OLD")
	if old != "" {
		cmds = append(cmds,
			&timed{name: "run-old", run: func() error { return run(old, "run", "--", "true") }},
			&timed{name: "version-old", run: func() error { return run(old, "--version") }})
	}
	tmuxWhy := ""
	if _, err := exec.LookPath("tmux"); err != nil {
		tmuxWhy = "tmux is not installed"
	} else {
		tm := startOwnTmux(b, env)
		cmds = append(cmds, &timed{name: "tmux", run: tm.roundTrip})
	}
	for _, c := range cmds {
		if err := c.run(); err != nil { // warm the page cache; fail early
			b.Fatalf("%s: %v", c.name, err)
		}
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range cmds {
			c := cmds[(i+j)%len(cmds)]
			t := time.Now()
			err := c.run()
			c.d = append(c.d, time.Since(t))
			if err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
		}
	}
	b.StopTimer()

	med := map[string]float64{}
	for _, c := range cmds {
		slices.Sort(c.d)
		med[c.name] = float64(c.d[len(c.d)/2].Microseconds()) / 1000
		b.ReportMetric(med[c.name], c.name+"-ms")
	}
	b.ReportMetric(med["run"]/med["timeout"], "run/timeout")
	b.ReportMetric(med["exec"]/med["bash"], "exec/bash")
	b.ReportMetric(med["version"]/med["empty"], "version/empty")
	if old != "" {
		b.ReportMetric(med["run"]/med["run-old"], "run/run-old")
		b.ReportMetric(med["version"]/med["version-old"], "version/version-old")
	}
	if tmuxWhy == "" {
		b.ReportMetric(med["tmux"]/med["exec"], "tmux/exec")
	} else {
		b.Logf("tmux/exec not measured: %s", tmuxWhy)
	}
}

// ownTmux is a tmux server of the benchmark's own, on its own socket,
// running one bash. It is stopped through that socket and, should it
// outlive that, killed by its pid.
type ownTmux struct {
	sock string
	env  []string
}

func startOwnTmux(b *testing.B, env []string) *ownTmux {
	t := &ownTmux{sock: filepath.Join(b.TempDir(), "tmux.sock"), env: env}
	if out, err := t.cmd("new-session", "-d", "-s", "bench", "bash", "--norc", "--noprofile").CombinedOutput(); err != nil {
		b.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	out, err := t.cmd("display-message", "-p", "-t", "bench", "#{pid}").Output()
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	var pidfd int
	if err == nil && perr == nil {
		// A pidfd holds the server itself: a kill through it can never
		// hit a process that reused the pid.
		pidfd, err = unix.PidfdOpen(pid, 0)
	}
	if err != nil || perr != nil {
		t.cmd("kill-server").Run()
		b.Fatalf("tmux server pid: %v %v %q", err, perr, out)
	}
	b.Cleanup(func() {
		defer unix.Close(pidfd)
		t.cmd("kill-server").Run()
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 2000); n == 0 {
			unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		}
	})
	return t
}

func (t *ownTmux) cmd(args ...string) *exec.Cmd {
	c := exec.Command("tmux", append([]string{"-S", t.sock}, args...)...)
	c.Env = t.env
	return c
}

// roundTrip runs true in the tmux shell and waits until it has: what a
// tool driving a shell through tmux pays per command.
func (t *ownTmux) roundTrip() error {
	if out, err := t.cmd("send-keys", "-t", "bench", "true; tmux -S "+t.sock+" wait-for -S done", "Enter").CombinedOutput(); err != nil {
		return fmt.Errorf("tmux send-keys: %v %s", err, out)
	}
	if out, err := t.cmd("wait-for", "done").CombinedOutput(); err != nil {
		return fmt.Errorf("tmux wait-for: %v %s", err, out)
	}
	return nil
}
