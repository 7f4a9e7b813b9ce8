//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/wire"
)

// TestExecStateIsDurableWhenAcknowledged: a client that has the result of a
// cd/export has it for good: the daemon SIGKILLed the instant the client
// has the result, then a reboot (every shell gone, the state directory
// kept), and the next command still runs in that cwd and environment.
// Before the record was written ahead of the result, most trials lost it.
func TestExecStateIsDurableWhenAcknowledged(t *testing.T) {
	e := newDaemonEnv(t)
	const trials = 20
	lost := 0
	for i := 0; i < trials; i++ {
		if _, rc := e.exec("d", "true"); rc != 0 { // the daemon and the shell are up
			t.Fatalf("trial %d: exec rc %d", i, rc)
		}
		shell, dpid := e.ls()["d"].ShellPid, e.daemonPid()
		if shell == 0 || dpid == 0 {
			t.Fatalf("trial %d: shell %d daemon %d", i, shell, dpid)
		}
		dir := t.TempDir()
		c := e.rawConn()
		env := append(testproc.Env(e.mark), "CORRAL_STATE_DIR="+e.state)
		execCall(c, &wire.Exec{Session: "d", Command: fmt.Sprintf("cd %s && export V=%d", dir, i), Dir: "/", Env: env})
		c.Net().SetReadDeadline(time.Now().Add(20 * time.Second))
		r, werr, err := callEnd(c)
		syscall.Kill(dpid, syscall.SIGKILL) // ours: started by our corral in our state dir
		if r == nil {
			t.Fatalf("trial %d: no result: %v %v", i, werr, err)
		}
		if r.ExitCode != 0 || r.StateNotSaved != "" || r.Cwd != dir {
			t.Fatalf("trial %d: result %+v", i, r)
		}
		c.Net().Close()
		if !waitGone(dpid, 5*time.Second) {
			t.Fatal("daemon did not die")
		}
		e.awaitSocket(false, 5*time.Second, "the killed daemon's socket still accepts connections")
		// The reboot: the shell goes too.
		syscall.Kill(shell, syscall.SIGKILL) // ours: recorded by our daemon
		if !waitGone(shell, 5*time.Second) {
			t.Fatal("shell did not die")
		}
		out, rc := e.exec("d", `echo "$PWD $V"`)
		if want := fmt.Sprintf("%s %d\n", dir, i); rc != 0 || out != want {
			t.Logf("trial %d: after the reboot %q (rc %d), want %q", i, out, rc, want)
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged cd/export lost to a daemon kill plus a reboot", lost, trials)
	}
}

// TestExecStateNotSavedOnAFullDisk: when the session's state after a
// command cannot be recorded (the disk is full), the client hears it: the
// result says so, and corral exec says so on stderr and exits 125 even
// though the command itself exited 0. Once there is room, the state is
// recorded again.
func TestExecStateNotSavedOnAFullDisk(t *testing.T) {
	state := smallStateDir(t)
	e := newDaemonEnvAt(t, state)
	if out, rc := e.exec("a", "cd / && echo ok"); rc != 0 || out != "ok\n" {
		t.Fatalf("before the disk fills: %q %d", out, rc)
	}
	fillPath := fillDisk(state)
	// 500 KiB of environment cannot be recorded now.
	big := "export"
	for i := 0; i < 5; i++ {
		big += fmt.Sprintf(" BIG%d=$(head -c %d /dev/zero | tr '\\0' x)", i, 100<<10)
	}
	out, errs, rc := e.run("exec", "-s", "a", "--", big+" && echo ran")
	if rc != 125 || out != "ran\n" || !strings.Contains(errs, "not saved") || !strings.Contains(errs, "no space left") {
		t.Fatalf("a state change on a full disk: exit %d, stdout %q, stderr %q", rc, out, errs)
	}
	// The raw result says it too, in its own field.
	c := e.rawConn()
	execCall(c, &wire.Exec{Session: "a", Command: "export MORE=1", Dir: "/", Env: testproc.Env(e.mark)})
	c.Net().SetReadDeadline(time.Now().Add(20 * time.Second))
	res, werr, err := callEnd(c)
	if res == nil {
		t.Fatalf("no result: %v %v", werr, err)
	}
	if !strings.Contains(res.StateNotSaved, "no space left") || res.ExitCode != 0 {
		t.Fatalf("raw result on a full disk: %+v", res)
	}
	// The live shell has the state all along.
	if out, _, _ := e.run("exec", "-s", "a", "--", `echo ${#BIG4} $MORE`); out != fmt.Sprintf("%d 1\n", 100<<10) {
		t.Fatalf("the live shell lost its state: %q", out)
	}
	os.Remove(fillPath)
	if out, errs, rc := e.run("exec", "-s", "a", "--", "echo saved"); rc != 0 || out != "saved\n" || errs != "" {
		t.Fatalf("after room was made: %q %q %d", out, errs, rc)
	}
}

// TestExecStreamValidation: an exec call that breaks the protocol is
// refused with bad_request and a message that says what was wrong, also
// while its command runs (the command is stopped first), and the session
// goes on serving.
func TestExecStreamValidation(t *testing.T) {
	e := newDaemonEnv(t)
	e.exec("v", "true")
	env := testproc.Env(e.mark)
	type frame struct {
		typ byte
		b   []byte
	}
	start := func(stdin bool) frame {
		b, _ := json.Marshal(wire.Call{Call: wire.CallExec, Exec: &wire.Exec{Session: "v", Command: "cat >/dev/null; sleep 30", Dir: "/", Env: env, Stdin: stdin}})
		return frame{wire.FrameCall, b}
	}
	stdin := frame{wire.FrameStdin, []byte("x\n")}
	eof := frame{wire.FrameEOF, nil}
	cases := []struct {
		name   string
		frames []frame
		want   string
	}{
		{"exec without its request", []frame{{wire.FrameCall, []byte(`{"call":"exec"}`)}}, "without its exec"},
		{"second call", []frame{start(false), start(false)}, "second call"},
		{"stdin after its end", []frame{start(true), stdin, eof, stdin}, "after stdin end of file"},
		{"second end of stdin", []frame{start(true), eof, eof}, "after stdin end of file"},
		{"stdin not announced", []frame{start(false), stdin}, "stdin"},
		{"unknown frame mid-call", []frame{start(false), {'z', nil}}, "frame"},
		// A client must not make the daemon queue megabytes per call.
		{"oversized stdin frame", []frame{start(true), {wire.FrameStdin, make([]byte, 1<<20)}}, "stdin frame"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := e.rawConn()
			// The client keeps its side open: the daemon must notice the
			// violation itself, not wait for the connection to end.
			go func() {
				for _, f := range c.frames {
					if rawFrame(conn, f.typ, f.b) != nil {
						return
					}
				}
			}()
			began := time.Now()
			conn.Net().SetReadDeadline(time.Now().Add(15 * time.Second))
			res, werr, err := callEnd(conn)
			if res != nil {
				t.Fatalf("got a result %+v", res)
			}
			if werr == nil || werr.Kind != wire.KindBadRequest || !strings.Contains(werr.Message, c.want) {
				t.Fatalf("got %+v %v, want bad_request saying %q", werr, err, c.want)
			}
			t.Logf("%v after %v", werr.Message, time.Since(began).Round(time.Millisecond))
		})
	}
	if out, rc := e.exec("v", "echo still"); rc != 0 || out != "still\n" {
		t.Fatalf("after the malformed calls: %q %d", out, rc)
	}
}

// startExecClient starts corral exec of code in session s (or a oneshot)
// with the client in a process group of its own (so that a test's signal
// reaches it alone) and waits for the command to write its pid to pidFile.
func startExecClient(t *testing.T, e *daemonEnv, oneshot bool, code, pidFile string) (*exec.Cmd, int, *bytes.Buffer) {
	t.Helper()
	where := []string{"-s", "s"}
	if oneshot {
		where = []string{"--oneshot"}
	}
	c := cli(t, e.mark, e.state, append(append([]string{"exec"}, where...), "--", code)...)
	var errb bytes.Buffer
	c.Stderr = &errb
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c, testproc.PidFile(t, pidFile, 20*time.Second), &errb
}

// interruptClient sends the corral exec client c SIGINT n times, 300 ms
// apart, waits for it, and returns how long after the first SIGINT it
// exited and its Wait error. The test fails if the command (pid, ours)
// outlived the client; it is killed then.
func interruptClient(t *testing.T, c *exec.Cmd, pid int, errb *bytes.Buffer, n int) (time.Duration, error) {
	t.Helper()
	began := time.Now()
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		c.Process.Signal(syscall.SIGINT)
	}
	err := c.Wait()
	took := time.Since(began)
	alive := testproc.Alive(pid)
	t.Logf("client exited after %v with %d: %q", took.Round(time.Millisecond), exitCode(err), errb.String())
	if alive {
		syscall.Kill(pid, syscall.SIGKILL) // ours: the command we started
		t.Fatalf("the client exited %v after the first of %d SIGINTs while the command (pid %d) still ran", took, n, pid)
	}
	return took, err
}

// TestExecInterruptWaitsForTheTree: Ctrl-C on corral exec stops the command
// as corral run does: the client exits only once the command's whole tree
// is gone (a command ignoring the forwarded SIGINT lives out the grace), with 130; a second
// Ctrl-C kills at once. The same holds for a oneshot.
func TestExecInterruptWaitsForTheTree(t *testing.T) {
	e := newDaemonEnv(t)
	e.exec("s", "true")
	code := func(pidFile string) string {
		// It ignores the signal corral exec forwards (SIGINT) and
		// SIGTERM, so that only SIGKILL after the grace ends it.
		return `sh -c 'trap "" INT TERM; echo $$ > ` + pidFile + `; sleep 30; :'`
	}
	t.Run("one", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		c, pid, errb := startExecClient(t, e, false, code(pidFile), pidFile)
		took, err := interruptClient(t, c, pid, errb, 1)
		if rc := exitCode(err); rc != 130 || !strings.Contains(errb.String(), "interrupt") {
			t.Fatalf("exit %d, stderr %q; want 130 and the signal named", rc, errb.String())
		}
		if took < 3*time.Second {
			t.Fatalf("the TERM-ignoring command ended after %v, before the grace", took)
		}
	})
	twice := func(t *testing.T, oneshot bool) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		c, pid, errb := startExecClient(t, e, oneshot, code(pidFile), pidFile)
		took, err := interruptClient(t, c, pid, errb, 2)
		if took > 3*time.Second {
			t.Fatalf("a second SIGINT took %v to end the command", took)
		}
		if rc := exitCode(err); rc != 130 {
			t.Fatalf("exit %d, want 130", rc)
		}
	}
	t.Run("twice", func(t *testing.T) { twice(t, false) })
	t.Run("twice oneshot", func(t *testing.T) { twice(t, true) })
	if out, rc := e.exec("s", "echo next"); rc != 0 || out != "next\n" {
		t.Fatalf("the session after the interrupts: %q %d", out, rc)
	}
}

// TestExecCwdIsAStartFailure: --cwd is entered by the session before the
// command (and stays), the command's text left as given; a --cwd that
// cannot be entered fails the call before anything runs, with exit 125
// and a message naming it. Before, --cwd was a cd written in front of the
// command's text by the client, and a directory the client could not see
// was a usage error (exit 2) of the client's own: this test failed so.
func TestExecCwdIsAStartFailure(t *testing.T) {
	e := newDaemonEnv(t)
	dir := t.TempDir()
	ran := filepath.Join(t.TempDir(), "ran")
	if out, errs, rc := e.run("exec", "-s", "c", "--cwd", dir, "--", "pwd; echo }"); rc != 0 || out != dir+"\n}\n" {
		t.Fatalf("--cwd %s: exit %d, %q %q", dir, rc, out, errs)
	}
	if out, _, rc := e.run("exec", "-s", "c", "--", "pwd"); rc != 0 || out != dir+"\n" {
		t.Fatalf("the cd did not stay: %q %d", out, rc)
	}
	for _, cwd := range []string{"/nonexistent/corral-cwd", ran + "-file"} {
		if cwd != "/nonexistent/corral-cwd" {
			os.WriteFile(cwd, nil, 0o600)
		}
		out, errs, rc := e.run("exec", "-s", "c", "--cwd", cwd, "--", "touch "+ran)
		if rc != 125 || out != "" || !strings.Contains(errs, cwd) {
			t.Errorf("--cwd %s: exit %d, %q %q; want 125 naming it", cwd, rc, out, errs)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatalf("--cwd %s: the command ran", cwd)
		}
		t.Logf("--cwd %s: %s", cwd, strings.TrimSpace(errs))
	}
	if out, _, rc := e.run("exec", "-s", "c", "--", "pwd"); rc != 0 || out != dir+"\n" {
		t.Fatalf("after the refused cwds: %q %d", out, rc)
	}
}
