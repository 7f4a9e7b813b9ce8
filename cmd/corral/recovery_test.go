//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/testproc"
)

// exitHolderEnv makes the test binary an exit holder (see holdExits)
// instead of running tests: "HOLD_MS:PID,PID,...".
const exitHolderEnv = "CORRAL_TEST_EXIT_HOLDER"

// A helper role of the test binary, dispatched before any test runs.
func init() {
	if spec := os.Getenv(exitHolderEnv); spec != "" {
		os.Exit(holdExits(spec))
	}
}

// holdExits makes the given processes slow to die, as a debugger or a
// process stuck in the kernel would: it ptrace-seizes each with
// PTRACE_O_TRACEEXIT, so that even a SIGKILL leaves it stopped on its way
// out (still a member of its tree) until this holder lets it go, HOLD_MS
// after it stopped there. It prints "seized" once it holds them all, and
// returns when all are gone (or after two minutes).
func holdExits(spec string) int {
	runtime.LockOSThread() // ptrace requests come from the tracing thread
	ms, list, _ := strings.Cut(spec, ":")
	hold, _ := strconv.Atoi(ms)
	var pids []int
	for _, f := range strings.Split(list, ",") {
		pid, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "exit holder: bad pid", f)
			return 2
		}
		if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, unix.PTRACE_O_TRACEEXIT, 0, 0); e != 0 {
			fmt.Fprintf(os.Stderr, "exit holder: seize %d: %v\n", pid, e)
			return 1
		}
		pids = append(pids, pid)
	}
	fmt.Println("seized")
	stopped := map[int]time.Time{}
	left := len(pids)
	for deadline := time.Now().Add(2 * time.Minute); left > 0 && time.Now().Before(deadline); {
		var ws syscall.WaitStatus
		pid, _ := syscall.Wait4(-1, &ws, syscall.WALL|syscall.WNOHANG, nil)
		switch {
		case pid <= 0:
			for p, at := range stopped {
				if time.Since(at) >= time.Duration(hold)*time.Millisecond {
					syscall.PtraceCont(p, 0)
					delete(stopped, p)
				}
			}
			time.Sleep(10 * time.Millisecond)
		case ws.Exited() || ws.Signaled():
			left--
		case ws.Stopped() && ws.TrapCause() == unix.PTRACE_EVENT_EXIT:
			stopped[pid] = time.Now()
		case ws.Stopped():
			sig := ws.StopSignal()
			if sig == syscall.SIGTRAP {
				sig = 0
			}
			syscall.PtraceCont(pid, int(sig))
		}
	}
	return 0
}

// TestDaemonServesWhileRecoveryIsSlow: a new daemon whose recovery has many
// dead sessions to reap, each tree slow to die (a member held on its way
// out for 8 s after its SIGKILL), serves at once: the listing answers
// within a few seconds, showing those sessions as recovering; a taken-over
// session and a new one run commands meanwhile; a command for a session
// still being recovered is told so; once the reaps end, those sessions are
// down and start afresh.
func TestDaemonServesWhileRecoveryIsSlow(t *testing.T) {
	e := newDaemonEnv(t)
	const n, holdMs = 6, 8000
	if out, rc := e.exec("ok", "export OK=kept; echo up"); rc != 0 || out != "up\n" {
		t.Fatalf("ok: %q %d", out, rc)
	}
	var bgs []string
	var shells []int
	for i := 0; i < n; i++ {
		name := "slow" + strconv.Itoa(i)
		pidFile := filepath.Join(t.TempDir(), "bg")
		if _, rc := e.exec(name, "sleep 1000 & echo $! > "+pidFile); rc != 0 {
			t.Fatalf("%s: exit %d", name, rc)
		}
		bgs = append(bgs, strconv.Itoa(testproc.PidFile(t, pidFile, 5*time.Second)))
	}
	for name, s := range e.ls() {
		if strings.HasPrefix(name, "slow") {
			shells = append(shells, s.ShellPid)
		}
	}
	holder := exec.Command(os.Args[0])
	holder.Env = append(testproc.Env(e.mark), exitHolderEnv+"="+strconv.Itoa(holdMs)+":"+strings.Join(bgs, ","))
	var herr strings.Builder
	holder.Stderr = &herr
	hout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(hout).ReadString('\n'); line != "seized\n" {
		holder.Wait()
		if strings.Contains(herr.String(), "operation not permitted") {
			t.Skipf("cannot ptrace the sessions' processes here (Yama, or not root): %s", herr.String())
		}
		t.Fatalf("exit holder: %q %s", line, herr.String())
	}
	e.killDaemon()
	for _, pid := range shells { // the shells die (ours: recorded by our daemon); their trees are left
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(pid, 5*time.Second)
	}

	began := time.Now()
	list := e.ls() // starts the daemon
	took := time.Since(began)
	t.Logf("the first listing (daemon start included) took %v", took.Round(time.Millisecond))
	if took > 6*time.Second {
		t.Errorf("the first listing took %v", took)
	}
	if s := list["ok"]; s.State != "up" {
		t.Errorf("the live session after restart: %+v", s)
	}
	recovering := 0
	for i := 0; i < n; i++ {
		if list["slow"+strconv.Itoa(i)].State == "recovering" {
			recovering++
		}
	}
	if recovering == 0 {
		t.Errorf("no session listed as recovering: %+v", list)
	}
	cmds := time.Now()
	if out, rc := e.exec("ok", `echo "$OK"`); rc != 0 || out != "kept\n" {
		t.Errorf("the taken-over session during recovery: %q %d", out, rc)
	}
	if out, rc := e.exec("fresh", "echo new"); rc != 0 || out != "new\n" {
		t.Errorf("a new session during recovery: %q %d", out, rc)
	}
	if took := time.Since(cmds); took > 5*time.Second {
		t.Errorf("two commands during recovery took %v", took)
	}
	// The last of the slow sessions: the command waits for its recovery,
	// or is told it is still under way.
	out, errs, rc := e.run("exec", "-s", "slow"+strconv.Itoa(n-1), "--", "echo back")
	if rc != 0 && !strings.Contains(errs, "still being recovered") || rc == 0 && out != "back\n" {
		t.Errorf("a command for a recovering session: %q %q %d", out, errs, rc)
	}
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left := 0
		for name, s := range e.ls() {
			if strings.HasPrefix(name, "slow") && s.State == "recovering" {
				left++
			}
		}
		if left == 0 {
			t.Logf("every slow session recovered %v after the daemon started", time.Since(began).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(e.state, "daemon.log"))
			t.Fatalf("%d sessions still recovering after 45s\n%s", left, log)
		}
	}
	for i := 0; i < n; i++ {
		if out, rc := e.exec("slow"+strconv.Itoa(i), "echo back"); rc != 0 || out != "back\n" {
			t.Errorf("slow%d after its recovery: %q %d", i, out, rc)
		}
	}
	for _, b := range bgs {
		pid, _ := strconv.Atoi(b)
		if !waitGone(pid, 5*time.Second) {
			t.Errorf("a dead session's background job %d survived its reap", pid)
		}
	}
}

// TestDaemonTakeOverShortOfDescriptors: a new daemon that runs out of
// descriptors while it takes the shells over leaves every shell it could
// not take alone (none is stopped), lists those sessions as recovering
// with why, and keeps trying; the next daemon, with descriptors to spare,
// takes every shell over with its state intact.
func TestDaemonTakeOverShortOfDescriptors(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("needs prlimit (util-linux)")
	}
	e := newDaemonEnv(t)
	const n = 8
	dirs := map[string]string{}
	for i := 0; i < n; i++ {
		name, dir := "f"+strconv.Itoa(i), t.TempDir()
		dirs[name] = dir
		if _, rc := e.exec(name, "cd "+dir+"; export V="+name); rc != 0 {
			t.Fatalf("%s: exit %d", name, rc)
		}
	}
	before := e.ls()
	// What the daemon holds besides its sessions (4 each: 3 FIFOs and a
	// pidfd) is about what the next one needs before its first take-over.
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(e.daemonPid()) + "/fd")
	base := len(fds) - 4*n
	e.killDaemon()

	// The next daemon, in the foreground, under a descriptor limit that
	// lets it open its store and socket and serve a listing, but not take
	// every shell over. How many descriptors a daemon needs before its
	// first take-over depends on the machine: the limit is raised from
	// too low (no listing, or fewer shells taken than left) in steps
	// smaller than one take-over's 4 (3 FIFOs and a pidfd), restarting the
	// daemon each time, until half or more are taken and some left.
	var (
		d           *exec.Cmd
		logPath     string
		taken, left []string
	)
	log := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	stop := func() {
		d.Process.Kill()
		d.Wait()
		d = nil
	}
	t.Cleanup(func() {
		if d != nil {
			stop()
		}
	})
	first := base + 4*n/2 + 2
	for limit := first - 4; ; limit += 2 {
		if limit > first+8 {
			t.Fatalf("no descriptor limit up to %d left some shells to take over later:\n%s", limit, log())
		}
		logPath = filepath.Join(t.TempDir(), "daemon.log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		d = exec.Command(prlimit, "--nofile="+strconv.Itoa(limit)+":"+strconv.Itoa(limit), corralBin, "daemon")
		d.Env = append(testproc.Env(e.mark), "CORRAL_STATE_DIR="+e.state)
		d.Stdout, d.Stderr = logf, logf
		err = d.Start()
		logf.Close()
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log(), "daemon starting"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("the daemon limited to %d descriptors did not start:\n%s", limit, log())
			}
		}
		time.Sleep(2500 * time.Millisecond) // its first attempts, and a few retries
		for name, s := range before {
			if !testproc.Alive(s.ShellPid) {
				stop()
				t.Fatalf("session %s's shell %d was stopped by a daemon limited to %d descriptors:\n%s", name, s.ShellPid, limit, log())
			}
		}
		out, _, rc := e.run("ls", "--json")
		var list []lsEntry
		json.Unmarshal([]byte(out), &list)
		taken, left = nil, nil
		for _, s := range list {
			if s.State == "up" {
				taken = append(taken, s.Name)
			} else {
				left = append(left, s.Name)
			}
		}
		if rc == 0 && len(left) > 0 && len(taken) >= len(left) {
			t.Logf("with %d descriptors: taken over at once %v, left for later %v", limit, taken, left)
			break
		}
		if rc == 0 && len(left) == 0 {
			t.Fatalf("with %d descriptors every shell was taken over at once, with %d too few to serve", limit, limit-2)
		}
		stop()
	}
	if !strings.Contains(log(), "cannot take over shell now") {
		t.Errorf("no take-over failed for want of descriptors: the test proves nothing")
	}
	// It goes on trying, without touching the shells.
	time.Sleep(2 * time.Second)
	for name, s := range before {
		if !testproc.Alive(s.ShellPid) {
			t.Errorf("session %s's shell %d was stopped by a daemon retrying its take-over", name, s.ShellPid)
		}
	}
	if out, _, rc := e.run("ls", "--json"); rc != 0 || !strings.Contains(out, `"state":"recovering"`) || !strings.Contains(out, "too many open files") {
		t.Errorf("the sessions left for later are not listed as recovering, with why: %d %s", rc, out)
	}
	// With descriptors to spare, the next daemon takes every shell over,
	// its state intact.
	if _, errs, rc := e.run("daemon", "stop"); rc != 0 {
		t.Fatalf("daemon stop: %d %s", rc, errs)
	}
	d.Wait()
	d = nil
	after := e.ls()
	for name, s := range before {
		if a := after[name]; a.State != "up" || a.ShellPid != s.ShellPid {
			t.Errorf("%s after descriptors came back: %+v (was %+v)", name, a, s)
			continue
		}
		if out, rc := e.exec(name, `echo "$PWD $V"`); rc != 0 || out != dirs[name]+" "+name+"\n" {
			t.Errorf("%s: %q %d", name, out, rc)
		}
	}
	if tries := strings.Count(log(), "cannot take over shell now"); tries <= len(left) {
		t.Errorf("the take-overs that failed were not tried again (%d attempts for %d shells)", tries, len(left))
	}
	if t.Failed() {
		t.Logf("the limited daemon's log:\n%s", log())
	}
}
