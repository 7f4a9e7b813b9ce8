//go:build linux

package session

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
)

// fifoDir is the directory a session makes its commands' FIFOs in.
func fifoDir(s *Session) string {
	if s.cfg.HoldDir != "" {
		return s.cfg.HoldDir
	}
	return s.dir
}

// cmdFifoNames lists the commands' FIFOs named in dir.
func cmdFifoNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "o-") || strings.HasPrefix(n, "e-") {
			names = append(names, n)
		}
	}
	return names
}

// keptFifos returns the FIFOs the session's shell keeps for reuse, after
// waiting (bounded) until it keeps one of each stream.
func keptFifos(t *testing.T, s *Session) []*cmdPipe {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		sh := s.sh
		s.mu.Unlock()
		sh.mu.Lock()
		var kept []*cmdPipe
		for _, ps := range sh.free {
			kept = append(kept, ps...)
		}
		n0, n1 := len(sh.free[0]), len(sh.free[1])
		sh.mu.Unlock()
		if n0 > 0 && n1 > 0 {
			return kept
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell keeps %d stdout and %d stderr FIFOs for reuse", n0, n1)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCommandFifosAreReused: a command's stdout and stderr FIFOs that no
// one holds any more serve later commands, so a session does not make
// (and remove) two FIFOs for every command: on a journalled filesystem
// that was most of a command's cost. Before, each of 30 commands had a
// stdout FIFO of its own (30 names).
func TestCommandFifosAreReused(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		names := map[string]bool{}
		for i := 0; i < 30; i++ {
			out := mustRun(t, s, "readlink /proc/self/fd/1")
			names[strings.TrimSpace(out)] = true
		}
		// Quiet, maxFree+2 serve them all. A command that starts before the
		// reader of the FIFO it would reuse has seen end of file (a loaded
		// machine: CI saw 4 with maxFree 1) makes one more: still far from
		// one a command.
		if len(names) > 10 {
			t.Errorf("30 commands had %d stdout FIFOs: %v", len(names), names)
		}
		if names := cmdFifoNames(t, fifoDir(s)); len(names) > 2*(maxFree+2) {
			t.Errorf("the directory holds %d command FIFOs: %v", len(names), names)
		}
		// Output and status stay each command's own.
		for i := 0; i < 5; i++ {
			out, errs, r, err := run(t, s, "echo out"+strconv.Itoa(i)+"; echo err"+strconv.Itoa(i)+" >&2; (exit "+strconv.Itoa(i)+")")
			if r == nil || out != "out"+strconv.Itoa(i)+"\n" || errs != "err"+strconv.Itoa(i)+"\n" || r.ExitCode != i {
				t.Fatalf("command %d: %q %q %+v %v", i, out, errs, r, err)
			}
		}
		// A FIFO a background job still holds is not handed to a later
		// command: what the job writes later is background output.
		mustRun(t, s, "(sleep 0.5; echo JOB) &")
		for i := 0; i < 4; i++ {
			if out := mustRun(t, s, "echo n"+strconv.Itoa(i)); out != "n"+strconv.Itoa(i)+"\n" {
				t.Fatalf("next command %d: %q", i, out)
			}
		}
		waitBackground(t, s, "JOB\n", "")
	})
}

// TestKeptFifoSwappedOrWritten: a kept FIFO is opened again by its name,
// which the session's user can reach. A name swapped for a link to
// another file, or for another FIFO, is never opened as the next
// command's output: that command's output stays its own, and nothing
// lands in the other file. What someone wrote into a kept FIFO while no
// command had it is background output, not the next command's.
func TestKeptFifoSwappedOrWritten(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		mustRun(t, s, "true")
		mustRun(t, s, "true")
		mustRun(t, s, "true")
		kept := keptFifos(t, s)
		// Written while kept.
		for _, p := range kept {
			f, err := os.OpenFile(p.path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("INJECT" + strconv.Itoa(p.kind) + "\n")
			f.Close()
		}
		for i := 0; i < 6; i++ {
			out, errs, _, err := run(t, s, "echo ok; echo e >&2")
			if err != nil || out != "ok\n" || errs != "e\n" {
				t.Fatalf("after writes into kept FIFOs: %q %q %v", out, errs, err)
			}
		}
		var got Background
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(string(got.Stdout), "INJECT0") || !strings.Contains(string(got.Stderr), "INJECT1") {
			if time.Now().After(deadline) {
				t.Fatalf("what was written into kept FIFOs: background %q %q", got.Stdout, got.Stderr)
			}
			b := s.TakeBackground()
			got.Stdout = append(got.Stdout, b.Stdout...)
			got.Stderr = append(got.Stderr, b.Stderr...)
			time.Sleep(10 * time.Millisecond)
		}

		// Swapped: a link to a file of the attacker's, and another FIFO.
		kept = keptFifos(t, s)
		bait := filepath.Join(t.TempDir(), "bait")
		if err := os.WriteFile(bait, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for i, p := range kept {
			if err := os.Remove(p.path); err != nil {
				t.Fatal(err)
			}
			var err error
			if i%2 == 0 {
				err = os.Symlink(bait, p.path)
			} else {
				err = syscall.Mkfifo(p.path, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 6; i++ {
			out, errs, _, err := run(t, s, "echo ok"+strconv.Itoa(i)+"; echo e >&2")
			if err != nil || out != "ok"+strconv.Itoa(i)+"\n" || errs != "e\n" {
				t.Fatalf("after the swap: %q %q %v", out, errs, err)
			}
		}
		if b, _ := os.ReadFile(bait); len(b) > 0 {
			t.Fatalf("a command's output went through a swapped name: %q", b)
		}
	})
}

// detachedHeld starts a held session, runs a command in it and lets it
// go, as a daemon that stops does: its configuration, its shell's
// identity and its last state, for Attach.
func detachedHeld(t *testing.T, sh string, iso corral.Isolation, mark string) (Config, corral.Identity, State) {
	t.Helper()
	cfg, lastID := heldConfig(t, sh, iso, mark)
	s := newSession(t, cfg, mark)
	mustRun(t, s, "echo one")
	last := s.State()
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	return cfg, lastID(), last
}

// TestAttachRemovesLeftFifos: FIFO names an owner that died left in a
// held session's directory (the ones it kept for reuse) are removed when
// the next owner takes the shell over, so a daemon killed again and
// again does not fill the directory.
func TestAttachRemovesLeftFifos(t *testing.T) {
	heldCases(t, func(t *testing.T, sh string, iso corral.Isolation, mark string) {
		cfg, id, last := detachedHeld(t, sh, iso, mark)
		// What a SIGKILLed owner leaves: its kept FIFOs, still named.
		for _, n := range []string{"o-leftAAAAAAAA", "e-leftAAAAAAAA", "o-leftBBBBBBBB"} {
			if err := syscall.Mkfifo(filepath.Join(cfg.HoldDir, n), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s2 := mustAttach(t, cfg, id, last)
		if names := cmdFifoNames(t, cfg.HoldDir); len(names) != 0 {
			t.Fatalf("after Attach the directory still names %v", names)
		}
		for i := 0; i < 5; i++ {
			if out := mustRun(t, s2, "echo two"); out != "two\n" {
				t.Fatalf("after Attach: %q", out)
			}
		}
	})
}

// TestAttachMissesTheShellsFifo: a daemon killed just as a command ended
// leaves a shell whose descriptor 1 is, for a moment, the marker pipe its
// protocol function writes to; Attach, looking then, saw no FIFO of a
// command to take over, and the shell went back to the last command's
// FIFO, which nobody read: every later command's output stayed in it (an
// empty stdout, 1 in 40 runs of TestAttachRemovesLeftFifos under dash).
// The hook makes Attach miss it every time; the next command takes it
// over instead. Failed before the fix: after Attach: "".
func TestAttachMissesTheShellsFifo(t *testing.T) {
	heldCases(t, func(t *testing.T, sh string, iso corral.Isolation, mark string) {
		cfg, id, last := detachedHeld(t, sh, iso, mark)
		testHookNoAdopt = true
		s2 := mustAttach(t, cfg, id, last)
		testHookNoAdopt = false
		for i := 0; i < 3; i++ {
			out, errs, _, err := run(t, s2, "echo two; echo e >&2")
			if err != nil || out != "two\n" || errs != "e\n" {
				t.Fatalf("after Attach: %q %q %v", out, errs, err)
			}
		}
	})
}
