//go:build linux

package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// heldConfig is a held session's configuration; lastID returns the
// identity of the newest shell it started.
func heldConfig(t *testing.T, sh string, iso corral.Isolation, mark string) (cfg Config, lastID func() corral.Identity) {
	dir := filepath.Join(t.TempDir(), "held")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var id corral.Identity
	cfg = Config{Shell: sh, Isolation: iso, HoldDir: dir, TrackEnv: true, Dir: t.TempDir(), Env: testproc.Env(mark),
		OnStart: func(got corral.Identity) error {
			mu.Lock()
			id = got
			mu.Unlock()
			return nil
		}}
	return cfg, func() corral.Identity {
		mu.Lock()
		defer mu.Unlock()
		return id
	}
}

// mustAttach is Attach, failing the test if it fails; the session is
// closed, and its Close checked, at cleanup, as newSession does.
func mustAttach(t *testing.T, cfg Config, id corral.Identity, last State) *Session {
	t.Helper()
	s, err := Attach(cfg, id, last)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// heldCases runs f for each shell and each Linux isolation.
func heldCases(t *testing.T, f func(t *testing.T, sh string, iso corral.Isolation, mark string)) {
	matrix.ShellsAndIsolations(t, func(t *testing.T, sh, iso string) {
		f(t, sh, corral.Isolation(iso), testproc.Guard(t, 60*time.Second))
	})
}

// TestHeldSessionOutlivesItsOwner: a held session let go in the middle of
// a command (as by a daemon that stops or dies) keeps its shell running;
// Attach takes it over behind that command, with the same cwd and
// variables, and none of the old command's output leaks into the next.
func TestHeldSessionOutlivesItsOwner(t *testing.T) {
	heldCases(t, func(t *testing.T, sh string, iso corral.Isolation, mark string) {
		cfg, lastID := heldConfig(t, sh, iso, mark)
		s1 := newSession(t, cfg, mark)
		work := t.TempDir()
		mustRun(t, s1, "cd "+work+"; export KEPT='a b'")
		// The held shell keeps its channel open on descriptor 3; no
		// command can reach it.
		out, _, r, err := run(t, s1, "echo : >&3; echo w=$?; cat <&3; echo r=$?", Options{Timeout: 5 * time.Second})
		if err != nil && r.Outcome != corral.OutcomeExited || out != "w=2\nr=2\n" && out != "w=1\nr=1\n" {
			t.Fatalf("descriptor 3 reachable from a command: %q %+v", out, r)
		}
		ran := make(chan error, 1)
		go func() {
			_, _, _, err := run(t, s1, "sleep 0.4; echo late; echo late >&2")
			ran <- err
		}()
		time.Sleep(100 * time.Millisecond) // the command is under way
		last := s1.State()
		if err := s1.Detach(); err != nil {
			t.Fatal(err)
		}
		if err := <-ran; !errors.Is(err, ErrClosed) {
			t.Fatalf("the running Exec after Detach: %v", err)
		}
		held := lastID()
		if !testproc.Alive(held.Pid) {
			t.Fatal("the shell died with its owner")
		}
		s2 := mustAttach(t, cfg, held, last)
		if st := s2.State(); !st.Alive || st.Pid != held.Pid || st.Cwd != work {
			t.Fatalf("state after Attach: %+v", st)
		}
		out, errs, r, err := run(t, s2, `echo "$PWD|$KEPT"`)
		if err != nil || out != work+"|a b\n" || errs != "" {
			t.Fatalf("after Attach: %q %q %+v %v", out, errs, r, err)
		}
		if st := s2.State(); st.Pid != held.Pid || st.Resets != 0 {
			t.Fatalf("not the same shell: %+v", st)
		}
		// A taken-over shell that exits: its status is not ours to know,
		// and the result says so; the next command gets a fresh shell.
		_, _, r, err = run(t, s2, "exit 3")
		if r.Outcome != corral.OutcomeExited || r.ExitCode != -1 || !strings.Contains(r.Error, "cannot know") || err == nil {
			t.Fatalf("exit in a taken-over shell: %+v %v", r, err)
		}
		mustRun(t, s2, "cd "+work+"; export KEPT='a b'")
		// A reset of a taken-over shell stops its whole tree through the
		// identity gate, and the next command gets a fresh held shell.
		mustRun(t, s2, "sleep 60 & setsid sleep 60 &")
		_, _, r, err = run(t, s2, "sleep 60", Options{Timeout: 200 * time.Millisecond})
		if r.Outcome != corral.OutcomeTimeout {
			t.Fatalf("timeout on a taken-over shell: %+v %v", r, err)
		}
		if left := testproc.Survivors(mark); len(left) > 0 {
			t.Fatalf("survivors of the reset: %v", left)
		}
		mustRun(t, s2, "true")
		fresh := lastID()
		if fresh.Pid == held.Pid || s2.State().Pid != fresh.Pid {
			t.Fatalf("no fresh shell recorded: %+v -> %+v", held, fresh)
		}
	})
}

// TestAttachToAGoneShell: Attach refuses a shell that is gone, and a
// record naming a live process that is not the shell (its start time
// differs) is refused without a signal.
func TestAttachToAGoneShell(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	cfg, lastID := heldConfig(t, matrix.Shell(t, "dash", "bash"), "", mark)
	s := newSession(t, cfg, mark)
	mustRun(t, s, "true")
	held := lastID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(cfg, held, State{}); err == nil {
		t.Fatal("Attach to a closed session's shell succeeded")
	}
	// A live process of ours with the recorded pid but another start time:
	// a recycled pid, as far as the record can tell.
	fake := held
	fake.Pid = os.Getpid()
	fake.Isolation = corral.IsolationPgroup
	fake.Pgid = os.Getpid()
	if _, err := Attach(cfg, fake, State{}); err == nil {
		t.Fatal("Attach accepted a pid whose start time differs from the record")
	}
}

// TestAttachReleasesACommandWaitingForStdin: an owner that died after
// handing the shell a command with stdin, but before opening the stdin
// FIFO for writing, leaves the command waiting in open(2). Attach lets it
// through with end of file, so the resynchronisation, and the next
// command, do not wait for ever.
func TestAttachReleasesACommandWaitingForStdin(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	cfg, lastID := heldConfig(t, matrix.Shell(t, "bash"), "", mark)
	s1 := newSession(t, cfg, mark)
	mustRun(t, s1, "export KEPT=1")
	last := s1.State()
	in := filepath.Join(cfg.HoldDir, "in-orphaned")
	if err := syscall.Mkfifo(in, 0o600); err != nil {
		t.Fatal(err)
	}
	s1.mu.Lock()
	sh := s1.sh
	s1.mu.Unlock()
	// What Exec writes for a command with stdin, with no writer to come.
	if _, err := sh.ctl.Write([]byte(sh.proto.commandLine("cat; echo eof", newNonce(), in, false, true, false, false))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the shell is in open(2) on the FIFO
	s1.Detach()
	held := lastID()
	s2 := mustAttach(t, cfg, held, last)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out strings.Builder
	r, err := s2.Exec(ctx, "echo $KEPT", Options{Stdout: &out})
	if err != nil || out.String() != "1\n" {
		t.Fatalf("the command after the orphaned one: %q %+v %v", out.String(), r, err)
	}
	if _, err := os.Stat(in); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the orphaned stdin FIFO is still there: %v", err)
	}
}

// TestAttachCancelsAnOrphanedCommand: a command still running when its
// owner let go has no caller left; after TakeoverBound the new owner
// cancels it by a reset, and with RestoreOnReset the fresh shell starts
// where the last completed command left the session.
func TestAttachCancelsAnOrphanedCommand(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	cfg, lastID := heldConfig(t, matrix.Shell(t, "bash"), "", mark)
	cfg.RestoreOnReset = true
	s1 := newSession(t, cfg, mark)
	work := t.TempDir()
	mustRun(t, s1, "cd "+work+"; export KEPT=1")
	pidFile := filepath.Join(work, "pid")
	go run(t, s1, "sh -c 'echo $$ > "+pidFile+"; exec sleep 60'")
	orphan := testproc.PidFile(t, pidFile, 5*time.Second)
	last := s1.State()
	s1.Detach()
	held := lastID()
	s2 := mustAttach(t, cfg, held, last)
	start := time.Now()
	if got := mustRun(t, s2, `echo "$PWD $KEPT"`); got != work+" 1\n" {
		t.Fatalf("after the takeover: %q", got)
	}
	if el := time.Since(start); el > TakeoverBound+5*time.Second {
		t.Fatalf("the next command waited %v", el)
	}
	if testproc.Alive(orphan) {
		t.Fatalf("the orphaned command (pid %d) survived the takeover", orphan)
	}
	if st := s2.State(); st.Pid == held.Pid || st.Resets != 1 {
		t.Fatalf("the busy shell was not replaced: %+v", st)
	}
}

// TestHeldFifosChargeLittle: the kernel charges every open pipe's buffer
// slots to its user, and past /proc/sys/fs/pipe-user-pages-soft (16384
// pages) every new pipe of that user gets a 2-page buffer. Held FIFOs
// stay open for the life of a session, so they must stay small: the
// command channel one page, each output stream the default 16.
func TestHeldFifosChargeLittle(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	cfg, _ := heldConfig(t, matrix.Shell(t, "dash", "bash"), "", mark)
	s := newSession(t, cfg, mark)
	mustRun(t, s, "true")
	for name, want := range map[string]int{ctlName: 4096, outName: 65536, errName: 65536} {
		f, err := os.OpenFile(filepath.Join(cfg.HoldDir, name), os.O_RDWR|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unix.FcntlInt(f.Fd(), unix.F_GETPIPE_SZ, 0)
		f.Close()
		if err != nil || got != want {
			t.Errorf("%s: buffer of %d bytes (%v), want %d", name, got, err, want)
		}
	}
}
