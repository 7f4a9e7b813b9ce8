//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/testproc"
)

// Under pgroup isolation, `setsid -f env -i CMD` leaves the tree's group
// and drops its marker, and its parent exits at once, so it is reparented
// to corral run (the child subreaper). corral run owns every child it has,
// so the escapee is the tree's: stopped on timeout, killed when the root
// exits, released only by --keep-detached.
func TestRunKeepsASetsidEnvIEscapeeInTheTree(t *testing.T) {
	tools := lookTools(t, "env", "setsid", "sh", "sleep")
	for _, tc := range []struct {
		name  string
		flags []string
		after string // what the root does once the escapee is out
		// redirect is the escapee's own stdio redirection.
		redirect string
		want     int
		detached bool // the escapee outlives the run
		sigterm  bool // corral gets SIGTERM once the escapee is out
	}{
		{name: "timeout", flags: []string{"--timeout", "1s"}, after: "; exec " + tools["sleep"] + " 600", want: 124},
		{name: "sigterm", after: "; exec " + tools["sleep"] + " 600", sigterm: true, want: 128 + int(syscall.SIGTERM)},
		{name: "root-exits", after: "", want: 0},
		{name: "root-exits-stdio-closed", redirect: " </dev/null >/dev/null 2>&1", want: 0},
		{name: "keep-detached", flags: []string{"--keep-detached"}, redirect: " </dev/null >/dev/null 2>&1", want: 0, detached: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := testproc.Guard(t, 60*time.Second)
			state := t.TempDir()
			pidf := filepath.Join(state, "escapee.pid")
			// env -i keeps only the test's own marker, so the guard can
			// still find the escapee; the tree's marker is gone.
			// The root waits for the escapee's pid file before it goes on.
			script := fmt.Sprintf("%s -f %s -i %s %s -c 'echo $$ > %s; exec %s 600'%s; while [ ! -s %s ]; do %s 0.01; done%s",
				tools["setsid"], tools["env"], mark, tools["sh"], pidf, tools["sleep"], tc.redirect, pidf, tools["sleep"], tc.after)
			args := append([]string{"run", "--isolation", "pgroup"}, tc.flags...)
			c := cli(t, mark, state, append(args, "--", tools["sh"], "-c", script)...)
			var errb bytes.Buffer
			c.Stderr = &errb
			start := time.Now()
			var got int
			if tc.sigterm {
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				testproc.PidFile(t, pidf, 10*time.Second)
				c.Process.Signal(syscall.SIGTERM)
				got = exitCode(c.Wait())
			} else {
				got = exitCode(c.Run())
			}
			took := time.Since(start)
			b, _ := os.ReadFile(pidf)
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("escapee pid %q (exit %d): %s", b, got, errb.String())
			}
			if st, err := proc.ReadStat(pid); err == nil && !st.Zombie() && st.Sid == pid {
				if !tc.detached {
					t.Errorf("escapee %d survived the run (exit %d after %v): %s", pid, got, took, errb.String())
				}
				if ok, _ := proc.HasEnv(pid, mark); ok {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			} else if tc.detached {
				t.Errorf("--keep-detached: escapee %d with its stdio closed was killed", pid)
			}
			if got != tc.want {
				t.Errorf("exit %d, want %d: %s", got, tc.want, errb.String())
			}
			if strings.Contains(errb.String(), "drain cut off") {
				t.Errorf("drain cut off: %s", errb.String())
			}
			if left, _ := os.ReadDir(filepath.Join(state, "runs")); len(left) != 0 {
				t.Errorf("records left: %v", left)
			}
			t.Logf("exit %d after %v; escapee %d", got, took.Round(time.Millisecond), pid)
		})
	}
}

// After corral run is SIGKILLed, a `setsid -f env -i` escapee it had
// adopted is reparented to init with nothing that links it to the tree:
// no marker, no group of the tree, no member as parent. corral run
// records it in the tree's record while it runs, and reap finds it there.
func TestReapFindsAnEscapeeTheCrashedRunRecorded(t *testing.T) {
	tools := lookTools(t, "env", "setsid", "sh", "sleep")
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	pidf := filepath.Join(state, "escapee.pid")
	script := fmt.Sprintf("%s -f %s -i %s %s -c 'echo $$ > %s; exec %s 600' </dev/null >/dev/null 2>&1; while [ ! -s %s ]; do %s 0.01; done; echo up; exec %s 600",
		tools["setsid"], tools["env"], mark, tools["sh"], pidf, tools["sleep"], pidf, tools["sleep"], tools["sleep"])
	c := cli(t, mark, state, "run", "--isolation", "pgroup", "--", tools["sh"], "-c", script)
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	out.Read(make([]byte, 8))
	pid := testproc.PidFile(t, pidf, 5*time.Second)
	t.Cleanup(func() {
		if ok, _ := proc.HasEnv(pid, mark); ok && testproc.Alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	recorded := false
	for deadline := time.Now().Add(3 * time.Second); !recorded && time.Now().Before(deadline); {
		recs, _ := filepath.Glob(filepath.Join(state, "runs", "*.json"))
		for _, r := range recs {
			b, _ := os.ReadFile(r)
			recorded = recorded || strings.Contains(string(b), fmt.Sprintf(`"pid": %d,`, pid)) && strings.Contains(string(b), `"adopted"`)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Process.Kill() // corral crashes
	c.Wait()
	t.Logf("escapee %d recorded before the crash: %v", pid, recorded)
	rep, err := cli(t, mark, state, "reap", "--json").Output()
	if err != nil {
		t.Fatalf("reap: %v\n%s", err, rep)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testproc.Alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if testproc.Alive(pid) {
		t.Fatalf("reap left the escapee %d of the crashed run alive:\n%s", pid, rep)
	}
	if left := testproc.Survivors(mark); len(left) > 0 {
		t.Fatalf("reap left %v:\n%s", left, rep)
	}
}
