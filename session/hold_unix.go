//go:build unix

package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/statedir"
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
//
// dir must be ours alone (statedir.OpenPrivate): it is opened once,
// without following a link, and every FIFO is made and opened inside that
// open directory, so a path swapped meanwhile changes nothing. The FIFOs'
// identities are returned for the record.
func makeHeld(dir string) (*shellEnds, Fifos, error) {
	d, err := statedir.OpenPrivate(dir)
	if err != nil {
		return nil, Fifos{}, fmt.Errorf("held session: %w", err)
	}
	defer d.Close()
	dfd := int(d.Fd())
	removeHeldIn(d)
	e := &shellEnds{}
	var ids [3]FileID
	for i, name := range []string{outName, errName, ctlName} {
		if err := mkfifoIn(dfd, dir, name, 0o600); err != nil {
			e.closeTheirs()
			return nil, Fifos{}, fmt.Errorf("held session: mkfifo %s: %w", filepath.Join(dir, name), err)
		}
		f, id, err := openFifo(dfd, dir, name, unix.O_RDWR, FileID{})
		if err != nil {
			e.closeTheirs()
			return nil, Fifos{}, err
		}
		if name == ctlName {
			// Commands go through a page at a time, no slower: bash
			// reads them a byte at a time anyway.
			setPipeSize(f, 4096)
		}
		e.theirs[i], ids[i] = f, id
	}
	fifos := Fifos{Out: ids[0], Err: ids[1], Ctl: ids[2]}
	if _, err := e.openOurs(d, dir, fifos); err != nil {
		e.closeTheirs()
		return nil, Fifos{}, err
	}
	return e, fifos, nil
}

// openOurs opens our ends of the held FIFOs in the open directory d (dir
// in errors) and checks each against want (a zero FileID: any FIFO of
// ours), and returns what it opened. It never blocks: it fails (ENXIO)
// if nothing holds the channel for reading, that is, if the shell is gone.
// Nothing is written.
func (e *shellEnds) openOurs(d *os.File, dir string, want Fifos) (Fifos, error) {
	var got Fifos
	var err error
	dfd := int(d.Fd())
	if e.ctl, got.Ctl, err = openFifo(dfd, dir, ctlName, unix.O_WRONLY|unix.O_NONBLOCK, want.Ctl); err != nil {
		return Fifos{}, err
	}
	if e.streams[0], got.Out, err = openFifo(dfd, dir, outName, unix.O_RDONLY|unix.O_NONBLOCK, want.Out); err != nil {
		e.closeOurs()
		return Fifos{}, err
	}
	if e.streams[1], got.Err, err = openFifo(dfd, dir, errName, unix.O_RDONLY|unix.O_NONBLOCK, want.Err); err != nil {
		e.closeOurs()
		return Fifos{}, err
	}
	// Our read ends are open, so these cannot fail with ENXIO; they are
	// checked against what the read ends found.
	for i, name := range []string{outName, errName} {
		if e.writers[i], _, err = openFifo(dfd, dir, name, unix.O_WRONLY|unix.O_NONBLOCK, [2]FileID{got.Out, got.Err}[i]); err != nil {
			e.closeOurs()
			return Fifos{}, err
		}
	}
	return got, nil
}

// openFifo opens name in the directory dfd (dir in errors) with flags,
// never following a symbolic link, and checks the FIFO twice: by name
// before opening it (so nothing that is not our FIFO is opened at all) and
// through the open descriptor after (so what is checked is what is used).
// It must be a FIFO of our euid that no one else may open, and, unless
// want is zero, the very one want names. A failed check wraps ErrNotOurs;
// a missing FIFO, or a channel no one reads (ENXIO), is a plain error.
func openFifo(dfd int, dir, name string, flags int, want FileID) (*os.File, FileID, error) {
	path := filepath.Join(dir, name)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, FileID{}, fmt.Errorf("held session: %s: %w", path, err)
	}
	if err := checkFifo(&st, path, want); err != nil {
		return nil, FileID{}, err
	}
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.ELOOP {
		return nil, FileID{}, fmt.Errorf("held session: %s is a symbolic link: %w", path, ErrNotOurs)
	}
	if err != nil {
		return nil, FileID{}, fmt.Errorf("held session: open %s: %w", path, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, FileID{}, fmt.Errorf("held session: %s: %w", path, err)
	}
	if err := checkFifo(&st, path, want); err != nil {
		unix.Close(fd)
		return nil, FileID{}, err
	}
	return os.NewFile(uintptr(fd), path), idOf(&st), nil
}

// idOf is the identity of the file st describes.
func idOf(st *unix.Stat_t) FileID { return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)} }

// checkFifo checks st (of path) as openFifo says.
func checkFifo(st *unix.Stat_t, path string, want FileID) error {
	var why string
	id := idOf(st)
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		why = "is a symbolic link"
	case st.Mode&unix.S_IFMT != unix.S_IFIFO:
		why = "is not a FIFO"
	case int(st.Uid) != os.Geteuid():
		why = fmt.Sprintf("belongs to uid %d, not to us (uid %d)", st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		why = fmt.Sprintf("has mode %04o: others can open it", st.Mode&0o777)
	case want != FileID{} && id != want:
		why = fmt.Sprintf("is not the FIFO made for this shell (device %d inode %d, recorded %d %d)", id.Dev, id.Ino, want.Dev, want.Ino)
	default:
		return nil
	}
	return fmt.Errorf("held session: %s %s: %w", path, why, ErrNotOurs)
}

// removeHeld removes the FIFOs of a held session whose shell is gone. A
// directory that is not ours alone is left as it is.
func removeHeld(dir string) {
	d, err := statedir.OpenPrivate(dir)
	if err != nil {
		return
	}
	removeHeldIn(d)
	d.Close()
}

func removeHeldIn(d *os.File) {
	for _, name := range []string{ctlName, outName, errName, codeName} {
		unix.Unlinkat(int(d.Fd()), name, 0)
	}
	releaseStdinIn(d)
	removeCmdPipesIn(d)
}

// removeCmdPipesIn removes the names of the commands' FIFOs (o-*, e-*)
// in the open directory d: an owner that died left the ones it kept for
// reuse (takeFree) and the ones still in use. Whoever holds one open
// keeps it; a shell taken over has its own adopted through /proc
// (adoptPipes), not by name.
func removeCmdPipesIn(d *os.File) {
	d.Seek(0, io.SeekStart) // d may have been read through already
	ents, _ := d.ReadDir(-1)
	for _, ent := range ents {
		if n := ent.Name(); strings.HasPrefix(n, "o-") || strings.HasPrefix(n, "e-") {
			unix.Unlinkat(int(d.Fd()), n, 0)
		}
	}
}

// releaseStdinIn ends every stdin FIFO left in the open directory d by an
// owner that died: a command of the shell may be waiting to open one for
// reading, for a writer that will never come. Opening it read-write lets
// any such opener through; removing it keeps new ones out; closing it
// gives the command end of file. Only FIFOs of ours are opened.
func releaseStdinIn(d *os.File) {
	dfd := int(d.Fd())
	ents, _ := d.ReadDir(-1)
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), "in-") {
			continue
		}
		f, _, err := openFifo(dfd, d.Name(), ent.Name(), unix.O_RDWR|unix.O_NONBLOCK, FileID{})
		unix.Unlinkat(dfd, ent.Name(), 0)
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
// The FIFOs are opened without following links in HoldDir, which must be
// ours alone, and each must be a FIFO of ours that no one else may open,
// and, if last.Fifos is set (as given to Config.OnHeld), the very one made
// for the shell. Otherwise Attach fails with ErrNotOurs before anything is
// sent through them, and leaves the shell alone: whoever swapped them
// must not read a command, nor forge an answer. (A zero last.Fifos, from a
// record of an older corral, skips only the last check.)
//
// If the shell is alive but cannot be taken over (its FIFOs are gone),
// Attach stops its tree through the identity gate and returns an error; a
// failure that is this process's own (out of descriptors, memory or
// threads: EMFILE, ENFILE, ENOMEM, EAGAIN) leaves the shell untouched. If
// the shell is gone already, the error wraps corral.ErrGone and what
// its tree may have left (background jobs) is not touched here: the
// caller reaps it through the same identity (Reap), as the daemon does.
func Attach(cfg Config, id corral.Identity, last State) (*Session, error) {
	if cfg.HoldDir == "" {
		return nil, errors.New("session: Attach needs Config.HoldDir")
	}
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	// The directory and FIFOs are checked before anything else: files
	// that are not ours are refused, and the shell left alone, before a
	// byte is sent or a signal considered.
	ends := &shellEnds{}
	var fifos Fifos
	d, openErr := statedir.OpenPrivate(cfg.HoldDir)
	if errors.Is(openErr, statedir.ErrUnsafe) {
		return nil, fmt.Errorf("session: take over shell %d: %w: %w", id.Pid, ErrNotOurs, openErr)
	}
	if openErr == nil {
		defer d.Close()
		fifos, openErr = ends.openOurs(d, cfg.HoldDir, last.Fifos)
	}
	if errors.Is(openErr, ErrNotOurs) {
		return nil, fmt.Errorf("session: take over shell %d: %w", id.Pid, openErr)
	}
	if openErr != nil && shortage(openErr) {
		// This process's own trouble (descriptors, memory), not the
		// shell's: leave it untouched for a later attempt.
		return nil, fmt.Errorf("session: take over shell %d: %w", id.Pid, openErr)
	}
	ac := &corral.Cmd{Grace: s.cfg.Grace, Drain: s.cfg.Drain}
	tree, err := ac.Adopt(id)
	if err != nil {
		if openErr == nil {
			ends.closeOurs()
		}
		return nil, fmt.Errorf("session: take over shell %d: %w", id.Pid, err)
	}
	if openErr != nil {
		tree.Stop(-1)
		tree.Wait()
		return nil, openErr
	}
	releaseStdinIn(d)
	sh := newShell(&s.cfg, tree, ends)
	sh.adoptPipes()
	removeCmdPipesIn(d)
	if _, err := sh.ctl.Write([]byte(sh.proto.prelude(true))); err != nil {
		sh.stop(-1)
		return nil, fmt.Errorf("session: take over shell %d: %w", id.Pid, err)
	}
	release, _ := s.turn.acquire(context.Background()) // a new queue: at once
	s.mu.Lock()
	s.sh, s.busy = sh, true
	s.state = last
	s.state.Env = append([]string(nil), last.Env...)
	s.state.Fifos = fifos
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
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EAGAIN, unix.ENOBUFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// CanAttach reports whether Attach can take a held shell over on this
// platform (Linux: a shell is re-found through its start time and a
// pidfd; elsewhere it cannot be verified, so it is never taken over).
func CanAttach() bool { return corral.CanAdopt() }
