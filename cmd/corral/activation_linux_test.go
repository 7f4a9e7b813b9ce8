//go:build linux

package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/wire"
)

// activatedDaemon starts corral daemon as systemd does for a socket unit:
// the listening socket as descriptor 3, LISTEN_FDS=1 and LISTEN_PID its
// own pid (set by a shell that then execs corral, keeping its pid, as
// systemd sets it between fork and exec). It returns the process and its
// stderr.
func activatedDaemon(t *testing.T, e *daemonEnv, l *net.UnixListener) (*exec.Cmd, *testproc.Buffer) {
	t.Helper()
	f, err := l.File() // a duplicate, for the child
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := exec.Command("sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=corral.socket exec "$0" daemon`, corralBin)
	c.Env = append(testproc.Env(e.mark), "CORRAL_STATE_DIR="+e.state)
	c.ExtraFiles = []*os.File{f}
	var errb testproc.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c, &errb
}

// listenAs makes the listening socket a socket unit would: path, 0600.
func listenAs(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	t.Cleanup(func() { l.Close(); os.Remove(path) })
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSocketActivation: a daemon handed its listening socket the way
// systemd hands it (fd 3, LISTEN_FDS, LISTEN_PID) serves on it instead of
// making its own (the socket file is the one made here, same inode), says
// so in its log, and leaves it in place when it stops; a client that
// connects while no daemon runs waits in the socket's backlog and is
// served by the next daemon given the socket. A socket that is not the
// state directory's, or is open to others, is refused, saying what to set.
func TestSocketActivation(t *testing.T) {
	e := newDaemonEnv(t)
	sock := wire.SocketPath(e.state)
	l := listenAs(t, sock)
	before, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	d, errb := activatedDaemon(t, e, l)
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	if out, rc := e.exec("a", `echo "hi [$LISTEN_FDS]"`); rc != 0 || out != "hi []\n" {
		t.Fatalf("exec on the activated daemon: rc %d %q\n%s", rc, out, errb.String())
	}
	if !strings.Contains(errb.String(), "socket activation") {
		t.Errorf("the daemon does not say it serves the passed socket:\n%s", errb.String())
	}
	if after, err := os.Stat(sock); err != nil || !os.SameFile(before, after) {
		t.Errorf("the socket was replaced (%v): the daemon made its own", err)
	}
	if _, errs, rc := e.run("daemon", "stop"); rc != 0 {
		t.Fatalf("daemon stop: %d %s", rc, errs)
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the activated daemon did not exit after daemon stop")
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the stopped daemon removed the manager's socket: %v", err)
	}

	// No daemon now; the socket still listens (held here, as by systemd):
	// a client waits in its backlog, and the next activated daemon
	// serves it.
	waiting := make(chan string, 1)
	go func() {
		out, errs, rc := runCaptured(cli(t, e.mark, e.state, "exec", "-s", "a", "--", "echo again"))
		waiting <- strings.Join([]string{out, errs}, "") + map[bool]string{true: "", false: " (failed)"}[rc == 0]
	}()
	time.Sleep(500 * time.Millisecond)
	d2, errb2 := activatedDaemon(t, e, l)
	exited2 := make(chan error, 1)
	go func() { exited2 <- d2.Wait() }()
	select {
	case got := <-waiting:
		if got != "again\n" {
			t.Errorf("the client that waited in the backlog: %q\n%s", got, errb2.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the client in the backlog was not served by the next daemon:\n%s", errb2.String())
	}
	e.run("kill", "--all")
	e.run("daemon", "stop")
	select {
	case <-exited2:
	case <-time.After(15 * time.Second):
		t.Fatal("the second activated daemon did not exit")
	}

	t.Run("another socket", func(t *testing.T) {
		other := listenAs(t, filepath.Join(t.TempDir(), "other.sock"))
		d, errb := activatedDaemon(t, e, other)
		err := d.Wait()
		if exitCode(err) != exitInternal || !strings.Contains(errb.String(), "set ListenStream="+sock) {
			t.Errorf("a daemon passed another socket: %v %s", err, errb.String())
		}
	})
	t.Run("open to others", func(t *testing.T) {
		os.Chmod(sock, 0o666)
		defer os.Chmod(sock, 0o600)
		d, errb := activatedDaemon(t, e, l)
		err := d.Wait()
		if exitCode(err) != exitInternal || !strings.Contains(errb.String(), "SocketMode=0600") {
			t.Errorf("a daemon passed a socket others may use: %v %s", err, errb.String())
		}
	})
}

// TestSocketUnitVerifies: systemd-analyze verify accepts the shipped
// socket unit with its service (the binary path pointed at this test's
// build, which verify wants to exist) with not one warning, and the
// socket unit names the socket the service's daemon serves.
func TestSocketUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze here")
	}
	dir := t.TempDir()
	for _, name := range []string{"corral.socket", "corral.service"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "/usr/local/bin/corral", corralBin)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if name == "corral.service" && !strings.Contains(text, "Environment=CORRAL_STATE_DIR=/var/lib/corral\n") {
			t.Errorf("corral.service does not set the state directory the socket unit names")
		}
		if name == "corral.socket" && !strings.Contains(text, "\nListenStream=/var/lib/corral/corral.sock\n") {
			t.Errorf("corral.socket does not listen on /var/lib/corral/corral.sock")
		}
	}
	c := exec.Command("systemd-analyze", "verify", "./corral.socket", "./corral.service")
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
