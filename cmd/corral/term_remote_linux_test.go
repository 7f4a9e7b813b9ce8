//go:build linux

package main

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRemoteTerminal: terminal sessions over mutual TLS from another
// network namespace, with the same verbs; a read-only identity may list
// them and read and wait on their screens, but not open, type into,
// resize or kill one.
func TestRemoteTerminal(t *testing.T) {
	e := newRemoteEnv(t)
	if out, errs, rc := e.remote(e.ca, "term", "open", "rt", "--cwd", "/tmp", "--env", "PS1=$ ", "--", "sh"); rc != 0 {
		t.Fatalf("remote term open: rc %d %q %s\n%s", rc, out, errs, e.readLog())
	}
	if _, errs, rc := e.remote(e.ca, "term", "open", "rel", "--cwd", "tmp", "--", "sh"); rc != 2 || !strings.Contains(errs, "absolute path") {
		t.Errorf("a relative --cwd for a remote daemon: rc %d %q", rc, errs)
	}
	for _, args := range [][]string{
		{"term", "wait", "rt", "--text", `^\$`, "--timeout", "10s"},
		{"term", "send", "rt", `echo "at $PWD"`},
		{"term", "send", "rt", "--keys", "Enter"},
		{"term", "wait", "rt", "--text", "^at /tmp", "--timeout", "10s"},
		{"term", "resize", "rt", "90x20"},
	} {
		if out, errs, rc := e.remote(e.ca, args...); rc != 0 {
			t.Fatalf("remote %v: rc %d %q %s", args, rc, out, errs)
		}
	}
	if out, errs, rc := e.remote(e.ca, "term", "screen", "rt"); rc != 0 || !strings.Contains(out, "at /tmp") {
		t.Fatalf("remote term screen: rc %d %q %s", rc, out, errs)
	}
	viewer := filepath.Join(t.TempDir(), "viewer")
	if out, rc := e.runLocal("tls", "issue", e.ca, "--client", "viewer", "--read-only", "--out", viewer); rc != 0 {
		t.Fatal(out)
	}
	if out, errs, rc := e.remote(viewer, "ls"); rc != 0 || !strings.Contains(out, "terminal") {
		t.Errorf("read-only ls: rc %d %q %s", rc, out, errs)
	}
	if out, errs, rc := e.remote(viewer, "term", "screen", "rt"); rc != 0 || !strings.Contains(out, "at /tmp") {
		t.Errorf("read-only term screen: rc %d %q %s", rc, out, errs)
	}
	if _, errs, rc := e.remote(viewer, "term", "wait", "rt", "--idle", "100ms", "--timeout", "10s"); rc != 0 {
		t.Errorf("read-only term wait: rc %d %s", rc, errs)
	}
	for _, args := range [][]string{
		{"term", "open", "v", "--cwd", "/tmp", "--", "sh"},
		{"term", "send", "rt", "echo ran"},
		{"term", "resize", "rt", "50x10"},
		{"kill", "rt"},
	} {
		out, errs, rc := e.remote(viewer, args...)
		if rc == 0 || !strings.Contains(errs, `identity "viewer" is read-only`) {
			t.Errorf("read-only %v: rc %d %q %q", args, rc, out, errs)
		}
	}
	if scr := e.must("term", "screen", "rt"); strings.Contains(scr, "ran") {
		t.Errorf("a read-only client typed into the session:\n%s", scr)
	}
	if m := e.ls(); len(m) != 1 || m["rt"].State != "up" {
		t.Errorf("after the read-only client: %v", m)
	}
}

// TestRemoteAttach: corral attach over mutual TLS from another network
// namespace, in a terminal (script(1) gives it one): the screen is drawn,
// what is typed reaches the program, ctrl-\ detaches with status 0.
func TestRemoteAttach(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script (util-linux) is not installed")
	}
	e := newRemoteEnv(t)
	if out, errs, rc := e.remote(e.ca, "term", "open", "ra", "--cwd", "/tmp", "--env", "PS1=$ ", "--", "sh"); rc != 0 {
		t.Fatalf("remote term open: rc %d %q %s", rc, out, errs)
	}
	runAttach(t, e, strings.Join([]string{corralBin, "attach", "ra", "--host", e.addr, "--tls", e.ca}, " "), "echo remote-$((20+22))\r", "remote-42")
	if scr := e.must("term", "screen", "ra"); !strings.Contains(scr, "remote-42") {
		t.Errorf("the session after the remote attach:\n%s", scr)
	}
	// A read-only identity attaches read-only: it sees the screen, and
	// what it types goes nowhere.
	viewer := filepath.Join(t.TempDir(), "viewer")
	if out, rc := e.runLocal("tls", "issue", e.ca, "--client", "viewer", "--read-only", "--out", viewer); rc != 0 {
		t.Fatal(out)
	}
	runAttach(t, e, strings.Join([]string{corralBin, "attach", "ra", "--read-only", "--host", e.addr, "--tls", viewer}, " "), "echo typed-by-viewer\r", "remote-42")
	// Without --read-only too: it may not open, so it watches.
	runAttach(t, e, strings.Join([]string{corralBin, "attach", "ra", "--host", e.addr, "--tls", viewer}, " "), "echo typed-by-viewer\r", "attaching read-only")
	time.Sleep(300 * time.Millisecond)
	if scr := e.must("term", "screen", "ra"); strings.Contains(scr, "typed-by-viewer") {
		t.Errorf("a read-only attach typed into the session:\n%s", scr)
	}
}

// runAttach runs attach (a command line) in the client's namespace in a
// terminal that script(1) gives it, types typed, waits for want on the
// screen, detaches with ctrl-\ and checks that it exited 0.
func runAttach(t *testing.T, e *remoteEnv, attach, typed, want string) {
	t.Helper()
	c := exec.Command("nsenter", "--net=/var/run/netns/"+e.net.clientNS, "--", "script", "-qfec", attach, "/dev/null")
	c.Env = append(inNS(t, e.mark, e.net.clientNS, filepath.Join(t.TempDir(), "no-state")).Env, "TERM=xterm")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 16)
	go func() {
		r := bufio.NewReader(out)
		var all strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			all.Write(buf[:n])
			seen <- all.String()
			if err != nil {
				close(seen)
				return
			}
		}
	}()
	last := "" // all the attach wrote so far
	await := func(want string) string {
		t.Helper()
		deadline := time.After(15 * time.Second)
		if strings.Contains(last, want) {
			return last
		}
		for {
			select {
			case s, ok := <-seen:
				last = s
				if strings.Contains(s, want) {
					return s
				}
				if !ok {
					t.Fatalf("attach ended before %q showed:\n%q", want, s)
				}
			case <-deadline:
				t.Fatalf("%q never showed in the remote attach:\n%q", want, last)
			}
		}
	}
	await("$")
	io.WriteString(in, typed)
	await(want)
	io.WriteString(in, "\x1c") // ctrl-\\
	s := await("[detached from ra]")
	in.Close()
	if err := c.Wait(); err != nil {
		t.Errorf("remote attach after a detach: %v\n%q", err, s)
	}
}
