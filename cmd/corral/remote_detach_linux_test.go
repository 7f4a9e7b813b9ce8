//go:build linux

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// slowNumbered is shell code that prints "line 1" to "line n", pausing
// 0.5 s after every 100 lines, and its output.
func slowNumbered(n int) (code, out string) {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; [ $((i %% 100)) = 0 ] && sleep 0.5; i=$((i+1)); done`, n), b.String()
}

// clientAt is e.client with a given state directory (the client's own:
// where it keeps a job's progress).
func (e *remoteEnv) clientAt(state, dir string, args ...string) *exec.Cmd {
	c := e.client(dir, args...)
	for i, kv := range c.Env {
		if strings.HasPrefix(kv, "CORRAL_STATE_DIR=") {
			c.Env[i] = "CORRAL_STATE_DIR=" + state
		}
	}
	return c
}

var jobLine = regexp.MustCompile(`corral: job (j[0-9a-f]+):`)

// startDetached starts a remote exec --detach-on-disconnect of code in
// the client namespace, with client state directory state; it returns
// once the client has printed the job id and wantFirst is in its output.
func (e *remoteEnv) startDetached(t *testing.T, state, session, code, wantFirst string) (c *exec.Cmd, job string, out, errb *testproc.Buffer) {
	t.Helper()
	c = e.clientAt(state, e.ca, "exec", "--detach-on-disconnect", "-s", session, "--", code)
	out, errb = &testproc.Buffer{}, &testproc.Buffer{}
	c.Stdout, c.Stderr = out, errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m := jobLine.FindStringSubmatch(errb.String())
		if m != nil && strings.Contains(out.String(), wantFirst) {
			return c, m[1], out, errb
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job id and %q after 20s: stdout %q stderr %q\n%s", wantFirst, out.String(), errb.String(), e.readLog())
		}
	}
}

// TestRemoteDetachLinkCut: a detached remote command whose link is cut
// (the veth taken down: no FIN, no RST) goes on; the daemon notices within
// its keepalive bound and keeps the output; the client, cut off too,
// exits 125 saying how to continue; once the link is back, corral exec
// --resume JOB from the client's machine continues from the byte it had
// (its own record), and the two parts are the command's output, no byte
// lost or repeated, with its exit status; a resume --offset 0 gives the
// whole output again.
func TestRemoteDetachLinkCut(t *testing.T) {
	e := newRemoteEnv(t)
	state := filepath.Join(t.TempDir(), "client-state")
	code, want := slowNumbered(2600)
	c, job, out, errb := e.startDetached(t, state, "cut", code, "line 150\n")
	link := func(up string) {
		if o, err := exec.Command("ip", "-n", e.net.clientNS, "link", "set", e.net.clientLink, up).CombinedOutput(); err != nil {
			t.Fatalf("link %s: %v %s", up, err, o)
		}
	}
	link("down")
	cutAt := time.Now()
	e.awaitLogWithin(t, 20*time.Second, "cut noticed", "client went away; its command goes on as a detached job", "job="+job)
	t.Logf("the daemon noticed the cut %v after it", time.Since(cutAt).Round(time.Millisecond))
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if rc := exitCode(err); rc != exitInternal || !strings.Contains(errb.String(), "--resume "+job) {
			t.Errorf("the cut-off client exited %d (want %d) saying %q", rc, exitInternal, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the cut-off client still waits 20s after the cut")
	}
	first := out.String()
	link("up")

	rest, errs, rc := runCaptured(e.clientAt(state, e.ca, "exec", "--resume", job))
	if rc != 0 {
		t.Fatalf("resume: rc %d %s\n%s", rc, errs, e.readLog())
	}
	t.Logf("job %s: %d bytes before the cut, %d resumed", job, len(first), len(rest))
	if first+rest != want {
		t.Fatalf("cut + resumed output is not the command's: %d+%d bytes, want %d\nfirst ends %q\nrest starts %q",
			len(first), len(rest), len(want), first[max(0, len(first)-40):], rest[:min(40, len(rest))])
	}
	if all, errs, rc := runCaptured(e.clientAt(state, e.ca, "exec", "--resume", job, "--offset", "0")); rc != 0 || all != want {
		t.Errorf("resume --offset 0: rc %d, %d bytes (want %d) %s", rc, len(all), len(want), errs)
	}
}

// TestRemoteDetachClientKilled: a detached remote command whose client is
// SIGKILLed goes on; resuming from the bytes the client had written gives
// the rest, no byte lost or repeated, and the command's exit status
// (here 3); a bad offset is refused saying what is kept.
func TestRemoteDetachClientKilled(t *testing.T) {
	e := newRemoteEnv(t)
	state := filepath.Join(t.TempDir(), "client-state")
	code, want := slowNumbered(800)
	c, job, out, _ := e.startDetached(t, state, "k", code+"; exit 3", "line 120\n")
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	first := out.String()
	e.awaitLog(t, "kill noticed", "client went away; its command goes on as a detached job", "job="+job)
	// Other state directory: nothing recorded, the offset is given.
	other := filepath.Join(t.TempDir(), "other-state")
	rest, errs, rc := runCaptured(e.clientAt(other, e.ca, "exec", "--resume", job, "--offset", strconv.Itoa(len(first))))
	if rc != 3 {
		t.Fatalf("resume: rc %d (want 3) %s\n%s", rc, errs, e.readLog())
	}
	if first+rest != want {
		t.Fatalf("killed + resumed output is not the command's: %d+%d bytes, want %d", len(first), len(rest), len(want))
	}
	if _, errs, rc := runCaptured(e.clientAt(other, e.ca, "exec", "--resume", job, "--offset", strconv.Itoa(len(want)+10))); rc != exitUsage ||
		!strings.Contains(errs, "keeps bytes 0 to "+strconv.Itoa(len(want))) {
		t.Errorf("resume past the end: rc %d %q", rc, errs)
	}
}

// awaitLogWithin is awaitLog with a bound of its own.
func (e *remoteEnv) awaitLogWithin(t *testing.T, bound time.Duration, what string, want ...string) {
	t.Helper()
	for deadline := time.Now().Add(bound); ; time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(e.readLog(), "\n") {
			all := true
			for _, w := range want {
				all = all && strings.Contains(line, w)
			}
			if all {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log line with %q within %v:\n%s", what, want, bound, e.readLog())
		}
	}
}

// TestResumeFlagsRefused: the flags of detached jobs, misused, are usage
// errors that say what to do, and start no daemon.
func TestResumeFlagsRefused(t *testing.T) {
	e := newDaemonEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--offset", "5", "-s", "a", "--", "true"}, "--offset is for --resume JOB"},
		{[]string{"exec", "--resume", "../x"}, "a job id is what corral exec --detach-on-disconnect printed"},
		{[]string{"exec", "--resume", "jabc", "-s", "a"}, "takes no command, -c, -f, -s"},
		{[]string{"exec", "--resume", "jabc", "--", "true"}, "takes no command"},
		{[]string{"exec", "--resume", "jabc", "--offset", "-3"}, "want a byte offset"},
	} {
		_, errs, rc := e.run(c.args...)
		if rc != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: rc %d %q (want %q)", c.args, rc, errs, c.want)
		}
	}
	if pid := e.daemonPid(); pid != 0 {
		t.Errorf("a usage error started a daemon (pid %d)", pid)
	}
}
