//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/testproc"
)

// arena is a sticky world-writable directory, as /tmp is, reachable by
// other users: where another user can make a state directory's path first.
func arena(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		os.Chmod(d, 0o711)
	}
	pub := filepath.Join(base, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777|os.ModeSticky)
	return pub
}

// corralAt runs corral with state as its state directory and env added.
func corralAt(t *testing.T, mark, state string, env []string, args ...string) (string, string, int) {
	t.Helper()
	c := cli(t, mark, state, args...)
	c.Env = append(c.Env, env...)
	return runCaptured(c)
}

// TestStateDirPlantedByAnotherUser: a state directory path that another
// user got to first (CORRAL_STATE_DIR=/tmp/x) is refused by the daemon's
// clients and by corral run, with a message naming it, and nothing is
// changed or created where it leads. (Before: through a link to a
// directory of root's, the daemon chmodded it 0700 and made its store and
// sessions/ in it; in a directory of the other user's, corral run made
// runs/ before refusing it.)
func TestStateDirPlantedByAnotherUser(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	u := testproc.NewUser(t)
	pub := arena(t)
	etc := filepath.Join(t.TempDir(), "etc") // stands in for /etc
	os.Mkdir(etc, 0o755)
	os.Chmod(etc, 0o755)
	link, theirs := filepath.Join(pub, "x"), filepath.Join(pub, "y")
	u.Run(t, testproc.Env(mark), "ln -s "+etc+" "+link+" && mkdir -m 777 "+theirs)
	t.Cleanup(func() { corralAt(t, mark, etc, nil, "daemon", "stop") }) // if one started there
	for _, tc := range []struct {
		state, target, want string
		args                []string
	}{
		{link, etc, "symbolic link", []string{"exec", "-s", "s", "--", "true"}},
		{link, etc, "symbolic link", []string{"run", "--", "true"}},
		{theirs, theirs, "belongs to uid", []string{"ls"}},
		{theirs, theirs, "belongs to uid", []string{"run", "--", "true"}},
	} {
		_, errs, rc := corralAt(t, mark, tc.state, nil, tc.args...)
		if rc == 0 || !strings.Contains(errs, tc.state) || !strings.Contains(errs, tc.want) {
			t.Errorf("%v in %s: exit %d, stderr %q; want a refusal naming it (%s)", tc.args, tc.state, rc, errs, tc.want)
		}
		if fi, _ := os.Lstat(tc.target); tc.target == etc && fi.Mode().Perm() != 0o755 {
			t.Errorf("%v: the link's target was changed to %v", tc.args, fi.Mode())
		}
		if ents, _ := os.ReadDir(tc.target); len(ents) != 0 {
			t.Errorf("%v: created in %s: %v", tc.args, tc.target, ents)
		}
	}
	// The Go client refuses to dial a socket in either.
	for _, state := range []string{link, theirs} {
		if c, err := client.Dial(context.Background(), state); !errors.Is(err, statedir.ErrUnsafe) {
			t.Errorf("client.Dial(%s): %v", state, err)
			if c != nil {
				c.Close()
			}
		}
	}
}

// TestTakeoverRefusesSwappedFifos: between a daemon's death and the next
// daemon's take-over, another user puts a FIFO of theirs in place of a
// held shell's command channel (its session directory was left open to
// them). The next daemon sends nothing through it: the session is listed
// broken with the reason, while the other sessions are taken over. A
// session whose directory is private again is settled at its next command
// (its old shell reaped, a fresh one started); one whose directory is
// still open to others is refused. (Before: the take-over reopened the
// FIFOs by path and sent the prelude and a resynchronisation through the
// other user's FIFO, which could answer with forged markers.)
func TestTakeoverRefusesSwappedFifos(t *testing.T) {
	u := testproc.NewUser(t)
	e := newDaemonEnvAt(t, filepath.Join(t.TempDir(), "state"))
	for _, s := range []string{"open", "swapped", "fine"} {
		if _, rc := e.exec(s, "export V="+s); rc != 0 {
			t.Fatalf("exec in %s: %d", s, rc)
		}
	}
	before := e.ls()
	e.killDaemon()
	sessions := filepath.Join(e.state, "sessions")
	// A way in for the other user, for the length of the attack.
	for _, d := range []string{filepath.Dir(filepath.Dir(e.state)), filepath.Dir(e.state), e.state, sessions} {
		os.Chmod(d, 0o711)
	}
	var spies []*os.File
	for _, s := range []string{"open", "swapped"} {
		dir := filepath.Join(sessions, s)
		os.Chmod(dir, 0o777)
		u.Run(t, testproc.Env(e.mark), "cd "+dir+" && mv ctl ctl.real && mkfifo -m 666 ctl")
		// The other user's reader, played by us: what it would read.
		spy, err := os.OpenFile(filepath.Join(dir, "ctl"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer spy.Close()
		spies = append(spies, spy)
	}
	for _, d := range []string{filepath.Dir(filepath.Dir(e.state)), filepath.Dir(e.state), e.state, sessions, filepath.Join(sessions, "swapped")} {
		os.Chmod(d, 0o700)
	}

	list := e.ls() // a new daemon starts and takes the shells over
	for i, spy := range spies {
		b := make([]byte, 4096)
		if n, _ := syscall.Read(int(spy.Fd()), b); n > 0 {
			t.Errorf("sent through the other user's FIFO (%d): %q", i, b[:n])
		}
	}
	if s := list["fine"]; s.State != "up" || s.ShellPid != before["fine"].ShellPid {
		t.Errorf("the untouched session: %+v", s)
	}
	out, _, _ := e.run("ls", "--json")
	for _, s := range []string{"open", "swapped"} {
		if list[s].State != "broken" {
			t.Errorf("%s: %+v, want broken", s, list[s])
		}
		if !testproc.Alive(before[s].ShellPid) {
			t.Errorf("%s: the shell was killed at the refusal", s)
		}
	}
	if !strings.Contains(out, "mode 0777") || !strings.Contains(out, "belongs to uid") {
		t.Errorf("the reasons listed: %s", out)
	}
	if log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log")); !strings.Contains(string(log), "refused to take over") {
		t.Errorf("daemon.log says nothing of the refusal:\n%s", log)
	}
	// Private again: the next command settles it (the old shell reaped
	// through its identity) and starts a fresh shell in fresh FIFOs.
	if out, rc := e.exec("swapped", "echo $V"); rc != 0 || out != "swapped\n" {
		t.Errorf("swapped, after: %q %d", out, rc)
	}
	if !waitGone(before["swapped"].ShellPid, 5*time.Second) {
		t.Errorf("the old shell of swapped was not reaped")
	}
	// Still open to others: refused, naming the directory.
	sdir := filepath.Join(sessions, "open")
	if _, errs, rc := e.run("exec", "-s", "open", "--", "echo ran"); rc == 0 || !strings.Contains(errs, sdir) {
		t.Errorf("open, after: %d %q", rc, errs)
	}
	for _, spy := range spies {
		b := make([]byte, 4096)
		if n, _ := syscall.Read(int(spy.Fd()), b); n > 0 {
			t.Errorf("sent through the other user's FIFO later: %q", b[:n])
		}
	}
	os.Chmod(sdir, 0o700) // so that cleanup's kill --all can go
}

// TestSessionShellIgnoresBashEnv: a client whose BASH_ENV redefines printf
// and leaves a trace creates a working session, and the file is never
// sourced; nor is a BASH_ENV in a session's record when its shell is
// restored from it. (Before: bash sourced BASH_ENV despite --noprofile
// --norc: the redefined printf made the session unstartable, and a
// recorded one ran in every restored shell.)
func TestSessionShellIgnoresBashEnv(t *testing.T) {
	e := newDaemonEnv(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "sourced")
	hook := filepath.Join(dir, "hook.sh")
	os.WriteFile(hook, []byte("echo $$ >> "+trace+"\nprintf() { :; }\n"), 0o644)
	out, errs, rc := corralAt(t, e.mark, e.state, []string{"SHELL=/bin/bash", "BASH_ENV=" + hook},
		"exec", "-s", "client", "--", "echo ok; echo ${BASH_ENV-unset}")
	if rc != 0 || out != "ok\nunset\n" {
		t.Errorf("a client's BASH_ENV: %q %q %d", out, errs, rc)
	}
	putRecord(t, e.state, &store.Session{Name: "recorded", Shell: "/bin/bash", Cwd: dir, State: store.Down,
		Env: append(testproc.Env(e.mark), "BASH_ENV="+hook, "ENV="+hook)})
	if out, rc := e.exec("recorded", "echo restored; echo ${BASH_ENV-unset}"); rc != 0 || out != "restored\nunset\n" {
		t.Errorf("a recorded BASH_ENV: %q %d", out, rc)
	}
	if b, err := os.ReadFile(trace); err == nil {
		t.Errorf("BASH_ENV was sourced: %q", b)
	}
}
