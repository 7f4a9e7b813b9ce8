//go:build unix

package daemon_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/session"
)

// openCore opens and starts a daemon's core in this process, on a fresh
// state directory, with no transport at all; cleanup kills its sessions
// and closes it.
func openCore(t *testing.T) (*daemon.Daemon, daemon.Peer) {
	t.Helper()
	d, err := daemon.Open(daemon.Config{StateDir: t.TempDir(), Isolation: "pgroup", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	me := daemon.Peer{UID: os.Getuid()}
	t.Cleanup(func() {
		if _, err := d.Kill(context.Background(), me, nil, true); err != nil {
			t.Errorf("kill all: %v", err)
		}
		d.Close()
	})
	return d, me
}

// execIn runs code through the core and returns its stdout.
func execIn(t *testing.T, d *daemon.Daemon, p daemon.Peer, req daemon.ExecRequest) (*daemon.ExecResult, string, error) {
	t.Helper()
	var out strings.Builder
	req.Options.Stdout = &out
	if err := daemon.CheckExec(&req); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := d.Exec(ctx, p, req)
	return res, out.String(), err
}

// TestCoreExecInProcess: the core runs a session's commands with state
// kept between them, says the session's cwd after each, enters a Cwd given
// with the request (persisting in the session), and lists the session up
// with its shell's pid.
func TestCoreExecInProcess(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	d, me := openCore(t)
	dir := t.TempDir()
	res, out, err := execIn(t, d, me, daemon.ExecRequest{Session: "s", Command: "cd " + dir + " && export V=1 && echo hi", Dir: "/", Env: env})
	if err != nil || res.ExitCode != 0 || out != "hi\n" || res.Cwd != dir || res.StateNotSaved != nil || res.Pid == 0 {
		t.Fatalf("first command: %+v %q %v", res, out, err)
	}
	res, out, err = execIn(t, d, me, daemon.ExecRequest{Session: "s", Command: `echo "$PWD $V"`, Dir: "/", Env: env})
	if err != nil || out != dir+" 1\n" {
		t.Fatalf("state between commands: %+v %q %v", res, out, err)
	}
	// A Cwd of the request is entered before the command, and stays.
	other := t.TempDir()
	res, out, err = execIn(t, d, me, daemon.ExecRequest{Session: "s", Command: "pwd", Dir: "/", Env: env, Cwd: other})
	if err != nil || out != other+"\n" || res.Cwd != other {
		t.Fatalf("with Cwd %s: %+v %q %v", other, res, out, err)
	}
	list, err := d.List(context.Background(), me)
	if err != nil || len(list) != 1 || list[0].Name != "s" || list[0].State != "up" || list[0].ShellPid == 0 || list[0].Cwd != other {
		t.Fatalf("list: %+v %v", list, err)
	}
	// A oneshot runs in a shell of its own, in its Cwd, and names no
	// session's cwd.
	res, out, err = execIn(t, d, me, daemon.ExecRequest{Oneshot: true, Command: "pwd; echo $V", Dir: "/", Env: env, Cwd: dir})
	if err != nil || out != dir+"\n\n" || res.Cwd != "" {
		t.Fatalf("oneshot: %+v %q %v", res, out, err)
	}
}

// TestCoreCwdThatCannotBeEntered: a Cwd that is missing, a file, or a
// directory the shell may not enter fails the command before it starts
// (start_failed, saying why), runs nothing, and leaves the session where
// it was. Before, --cwd was a cd written in front of the command's text,
// and its failure was the command's exit status 1 (or 2) with the shell's
// message mixed into the command's stderr.
func TestCoreCwdThatCannotBeEntered(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	d, me := openCore(t)
	if _, _, err := execIn(t, d, me, daemon.ExecRequest{Session: "s", Command: "cd /tmp", Dir: "/", Env: env}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	ran := filepath.Join(t.TempDir(), "ran")
	for _, c := range []struct{ name, cwd, want string }{
		{"missing", "/nonexistent/corral-cwd", "no such file or directory"},
		{"a file", file, "not a directory"},
	} {
		for _, oneshot := range []bool{false, true} {
			req := daemon.ExecRequest{Session: "s", Command: "touch " + ran, Dir: "/", Env: env, Cwd: c.cwd, Oneshot: oneshot}
			if oneshot {
				req.Session = ""
			}
			res, _, err := execIn(t, d, me, req)
			if err != nil || res.Outcome != corral.OutcomeStartFailed || !strings.Contains(res.Error, c.want) || !strings.Contains(res.Error, c.cwd) {
				t.Errorf("%s (oneshot %v): %+v %v; want start_failed saying %q", c.name, oneshot, res, err, c.want)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatalf("%s (oneshot %v): the command ran", c.name, oneshot)
			}
		}
	}
	if res, out, err := execIn(t, d, me, daemon.ExecRequest{Session: "s", Command: "pwd", Dir: "/", Env: env}); err != nil || out != "/tmp\n" {
		t.Fatalf("the session after the refused cwds: %+v %q %v", res, out, err)
	}
}

// TestCoreErrors: the core's refusals are its typed errors: a bad request,
// a session that is not there, a peer of another uid, a daemon stopping,
// a session killed under the command that waited for it.
func TestCoreErrors(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	d, me := openCore(t)
	for name, req := range map[string]daemon.ExecRequest{
		"bad name":     {Session: "../x", Command: "true"},
		"NUL":          {Session: "s", Command: "true\x00"},
		"relative cwd": {Session: "s", Command: "true", Cwd: "rel"},
		"env":          {Session: "s", Command: "true", Env: []string{"NOEQUALS"}},
		"both":         {Session: "s", Oneshot: true, Command: "true"},
	} {
		if err := daemon.CheckExec(&req); !errors.Is(err, daemon.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
	if _, _, err := execIn(t, d, me, daemon.ExecRequest{Session: "new", Command: "true", Dir: "/nonexistent/x", Env: env}); !errors.Is(err, daemon.ErrBadRequest) {
		t.Errorf("a session created in a missing directory: %v, want ErrBadRequest", err)
	}
	if _, err := d.Kill(context.Background(), me, []string{"nosuch"}, false); !errors.Is(err, daemon.ErrNotFound) {
		t.Errorf("kill of a missing session: %v, want ErrNotFound", err)
	}
	stranger := daemon.Peer{UID: os.Getuid() + 1}
	if _, err := d.List(context.Background(), stranger); !errors.Is(err, daemon.ErrPermission) {
		t.Errorf("list by uid %d: %v, want ErrPermission", stranger.UID, err)
	}
	if _, _, err := execIn(t, d, stranger, daemon.ExecRequest{Session: "s", Command: "true", Dir: "/", Env: env}); !errors.Is(err, daemon.ErrPermission) {
		t.Errorf("exec by uid %d: %v, want ErrPermission", stranger.UID, err)
	}

	// A command queued behind a running one on a session that is killed
	// meanwhile: the session is closed under it.
	started := make(chan struct{})
	go func() {
		execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "echo go; sleep 30", Dir: "/", Env: env,
			Options: session.Options{Stderr: nil}})
	}()
	go func() {
		for {
			if l, _ := d.List(context.Background(), me); len(l) > 0 {
				for _, s := range l {
					if s.Name == "k" && s.Busy {
						close(started)
						return
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first command never ran")
	}
	queued := make(chan error, 1)
	go func() {
		res, _, err := execIn(t, d, me, daemon.ExecRequest{Session: "k", Command: "true", Dir: "/", Env: env})
		if err == nil && res.Outcome != corral.OutcomeStartFailed {
			err = errors.New("ran: " + string(res.Outcome))
		}
		queued <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := d.Kill(context.Background(), me, []string{"k"}, false); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; !errors.Is(err, daemon.ErrSessionClosed) {
		t.Errorf("the command queued on a killed session: %v, want ErrSessionClosed", err)
	}

	d.Release() // as a stopping daemon's front-end does
	if _, _, err := execIn(t, d, me, daemon.ExecRequest{Session: "s", Command: "true", Dir: "/", Env: env}); !errors.Is(err, daemon.ErrStopping) {
		t.Errorf("exec on a stopping daemon: %v, want ErrStopping", err)
	}
}
