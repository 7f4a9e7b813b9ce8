//go:build unix

package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
)

// The named pipes of a held session, in its HoldDir.
const (
	ctlName = "ctl" // commands, read by the shell on its descriptor 3
	outName = "out" // the shell's stdout
	errName = "err" // the shell's stderr
)

// makeHeld makes fresh FIFOs in dir and opens them. They stay open for the
// life of the session, and the kernel charges each open pipe's buffer to
// its user (past /proc/sys/fs/pipe-user-pages-soft, 16384 pages, every
// new pipe of that user is cut to 2 pages): so the output FIFOs keep the
// default 16 pages and the command channel gets one, 33 pages a session.
// The shell's ends
// read-write, so that the shell always holds both a reader and a writer of
// each (no end of file on its commands, no SIGPIPE on its output, whoever
// else dies); ours as a plain writer of the channel and plain readers of
// the output, so that we do see EPIPE and end of file once the shell and
// everything it started are gone.
func makeHeld(dir string) (*shellEnds, error) {
	removeHeld(dir)
	e := &shellEnds{}
	for i, name := range []string{outName, errName, ctlName} {
		path := filepath.Join(dir, name)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			e.closeTheirs()
			return nil, fmt.Errorf("held session: %w", err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			e.closeTheirs()
			return nil, fmt.Errorf("held session: %w", err)
		}
		if name == ctlName {
			// Commands go through a page at a time, no slower: bash
			// reads them a byte at a time anyway.
			setPipeSize(f, 4096)
		}
		e.theirs[i] = f
	}
	if err := e.openOurs(dir); err != nil {
		e.closeTheirs()
		return nil, err
	}
	return e, nil
}

// openOurs opens our ends of the held FIFOs in dir. It never blocks: it
// fails (ENXIO) if nothing holds the channel for reading, that is, if the
// shell is gone.
func (e *shellEnds) openOurs(dir string) error {
	var err error
	if e.ctl, err = os.OpenFile(filepath.Join(dir, ctlName), os.O_WRONLY|syscall.O_NONBLOCK, 0); err != nil {
		return fmt.Errorf("held session: %w", err)
	}
	for i, name := range []string{outName, errName} {
		if e.streams[i], err = os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
			e.closeOurs()
			return fmt.Errorf("held session: %w", err)
		}
	}
	return nil
}

// removeHeld removes the FIFOs of a held session whose shell is gone.
func removeHeld(dir string) {
	for _, name := range []string{ctlName, outName, errName} {
		os.Remove(filepath.Join(dir, name))
	}
	releaseStdin(dir)
}

// releaseStdin ends every stdin FIFO left in dir by an owner that died:
// a command of the shell may be waiting to open one for reading, for a
// writer that will never come. Opening it read-write lets any such opener
// through; removing it keeps new ones out; closing it gives the command end
// of file.
func releaseStdin(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), "in-") {
			continue
		}
		path := filepath.Join(dir, ent.Name())
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0)
		os.Remove(path)
		if err == nil {
			f.Close()
		}
	}
}

// Attach takes over a held session's shell (Config.HoldDir) after its
// owner is gone, typically in a new process after the old one crashed or
// stopped. id is the shell tree's identity, as given to Config.OnStart;
// it is checked (start time, boot id, cgroup) before anything is
// signalled. last is what the old owner knew (its Cwd and Env are kept).
//
// The shell may still be running a command of the old owner, whose caller
// is gone with it. The session's first turn therefore belongs to a
// resynchronisation: a fresh marker is sent after whatever the shell is
// doing, and output up to it is discarded; commands wait behind it. An idle
// shell answers at once and is kept as it is. A shell that has not answered
// within TakeoverBound is running an orphaned command: that command is
// cancelled the way any command whose caller went away is, by a reset of
// the session (so with RestoreOnReset the fresh shell starts in the saved
// directory and environment).
//
// A held shell has one owner at a time; Attach does not check that the
// previous one is gone (the daemon knows it is: it holds the state
// directory's lock). The shell is not this process's child, so when it
// exits its status cannot be learnt: such a command's result says so.
//
// If the shell is alive but cannot be taken over (its FIFOs are gone),
// Attach stops its tree through the identity gate and returns an error; a
// failure that is this process's own (out of descriptors, memory or
// threads: EMFILE, ENFILE, ENOMEM, EAGAIN) leaves the shell untouched. If
// the shell is gone already, the error wraps contain's ErrGone and what
// its tree may have left (background jobs) is not touched here: the
// caller reaps it through the same identity, as the daemon does.
func Attach(cfg Config, id corral.Identity, last State) (*Session, error) {
	if cfg.HoldDir == "" {
		return nil, errors.New("session: Attach needs Config.HoldDir")
	}
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	// Our ends first: failing to open them for want of descriptors or
	// memory is this process's trouble, not the shell's, which is left
	// untouched for a later attempt.
	ends := &shellEnds{}
	oerr := ends.openOurs(cfg.HoldDir)
	if oerr != nil && shortage(oerr) {
		return nil, fmt.Errorf("session: take over shell %d: %w", id.Pid, oerr)
	}
	tree, err := contain.AdoptLive(containIdentity(id))
	if err != nil {
		ends.closeOurs()
		return nil, fmt.Errorf("session: take over shell %d: %w", id.Pid, err)
	}
	if oerr != nil {
		contain.Stop(tree, -1, contain.KillBound, nil)
		tree.Close()
		return nil, oerr
	}
	releaseStdin(cfg.HoldDir)
	sh := newShell(&s.cfg, tree, ends)
	if _, err := sh.ctl.Write([]byte(preludeFor(true))); err != nil {
		sh.stop(-1)
		return nil, fmt.Errorf("session: take over shell %d: %w", id.Pid, err)
	}
	release, _ := s.turn.acquire(context.Background()) // a new queue: at once
	s.mu.Lock()
	s.sh, s.busy = sh, true
	s.state = last
	s.state.Env = append([]string(nil), last.Env...)
	s.state.Alive, s.state.Pid, s.state.Busy = true, id.Pid, false
	s.mu.Unlock()
	go func() {
		defer release()
		ctx, cancel := context.WithTimeout(context.Background(), TakeoverBound)
		defer cancel()
		res, _ := sh.exec(ctx, ":", Options{snapshot: true}, s.dir)
		s.setBusy(false)
		s.afterCommand(sh, res, true)
		if sh.isDead() {
			s.discard(sh)
		}
	}()
	return s, nil
}

// shortage reports whether err is this process running short of a
// resource (descriptors, memory, threads), which says nothing of a shell.
func shortage(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.EAGAIN, syscall.ENOBUFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// CanAttach reports whether Attach can take a held shell over on this
// platform (Linux: a shell is re-found through its start time and a
// pidfd; elsewhere it cannot be verified, so it is never taken over).
func CanAttach() bool { return contain.CanAdopt() }

// TakeoverBound is how long Attach lets a taken-over shell finish what it
// was running before it cancels that command.
const TakeoverBound = time.Second
