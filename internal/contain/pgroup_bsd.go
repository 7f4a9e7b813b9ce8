//go:build unix && !linux

package contain

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On macOS and the BSDs the tree is a process group only: a descendant that
// calls setsid or double-forks leaves it, and corral cannot find it again.
// The group is signalled only while its leader (the root) is unreaped; the
// root's exit is learned from kqueue without reaping it.

func best() Isolation { return Pgroup }

// gateScript holds the root on a pipe (descriptor 3) until the hold hook
// has returned, then becomes the command under the same pid.
const gateScript = `read -r go <&3 || exit 125; exec 3<&-; exec "$@"`

func start(iso Isolation, spec *Spec) (Tree, error) {
	if iso != Auto && iso != Pgroup {
		return nil, fmt.Errorf("isolation %q: %w", iso, ErrUnsupported)
	}
	path, argv := spec.Path, spec.Argv
	files := spec.Files
	var gateR, gateW *os.File
	if spec.Hold != nil {
		var err error
		if gateR, gateW, err = os.Pipe(); err != nil {
			return nil, err
		}
		defer gateR.Close()
		path = "/bin/sh"
		argv = append([]string{"sh", "-c", gateScript, "sh", spec.Path}, spec.Argv[1:]...)
		files = append(files[:len(files):len(files)], gateR)
	}
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	env := append(spec.Env[:len(spec.Env):len(spec.Env)], spec.Marker)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir: spec.Dir, Env: env, Files: fds,
		Sys: &syscall.SysProcAttr{Setpgid: !spec.Setsid, Setsid: spec.Setsid, Foreground: spec.Foreground, Ctty: 0}})
	if err != nil {
		if gateW != nil {
			gateW.Close()
		}
		return nil, &os.PathError{Op: "fork/exec", Path: spec.Path, Err: err}
	}
	t := &bsdTree{ident: Identity{Isolation: Pgroup, Pid: pid, Pgid: pid, Marker: spec.Marker}, exited: make(chan struct{})}
	if err := t.watchExit(); err != nil {
		unix.Kill(pid, unix.SIGKILL)
		t.reap()
		return nil, err
	}
	if spec.Hold != nil {
		if err := spec.Hold(t.ident); err != nil {
			gateW.Close()
			unix.Kill(-pid, unix.SIGKILL) // leader unreaped: the group is ours
			t.reap()
			return nil, fmt.Errorf("%w: %w", ErrHold, err)
		}
		gateW.Write([]byte("go\n"))
		gateW.Close()
	}
	return t, nil
}

type bsdTree struct {
	ident  Identity
	exited chan struct{}
	status Status
	reaped bool
	termed bool
}

// watchExit closes exited when the root exits, leaving it a zombie.
func (t *bsdTree) watchExit() error {
	kq, err := unix.Kqueue()
	if err != nil {
		return fmt.Errorf("kqueue: %w", err)
	}
	ev := make([]unix.Kevent_t, 1)
	unix.SetKevent(&ev[0], t.ident.Pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	ev[0].Fflags = unix.NOTE_EXIT
	if _, err := unix.Kevent(kq, ev, nil, nil); err != nil {
		unix.Close(kq)
		if errors.Is(err, unix.ESRCH) { // already exited
			close(t.exited)
			return nil
		}
		return fmt.Errorf("kevent: %w", err)
	}
	go func() {
		defer unix.Close(kq)
		out := make([]unix.Kevent_t, 1)
		for {
			n, err := unix.Kevent(kq, nil, out, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n > 0 {
				break
			}
		}
		close(t.exited)
	}()
	return nil
}

func (t *bsdTree) reap() {
	if t.reaped {
		return
	}
	t.reaped = true
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(t.ident.Pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	if ws.Signaled() {
		t.status = Status{Code: -1, Signal: int(ws.Signal())}
	} else {
		t.status = Status{Code: ws.ExitStatus()}
	}
}

func (t *bsdTree) Identity() Identity      { return t.ident }
func (t *bsdTree) Exited() <-chan struct{} { return t.exited }
func (t *bsdTree) Status() Status          { return t.status }

func (t *bsdTree) signal(sig unix.Signal) error {
	if t.reaped {
		return nil // the group id is no longer provably ours
	}
	if err := unix.Kill(-t.ident.Pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal group %d: %w", t.ident.Pgid, err)
	}
	return nil
}

// Terminate signals the group once; the group cannot be listed to find
// what appeared since.
func (t *bsdTree) Terminate() error {
	if t.termed {
		return nil
	}
	t.termed = true
	return t.signal(unix.SIGTERM)
}
func (t *bsdTree) Kill() error { return t.signal(unix.SIGKILL) }

func (t *bsdTree) Members() ([]int, error) {
	pids, err := groupMembers(t.ident.Pgid)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.exited:
		out := pids[:0]
		for _, p := range pids {
			if p != t.ident.Pid {
				out = append(out, p)
			}
		}
		pids = out
	default:
	}
	return pids, nil
}

func (t *bsdTree) WaitEmpty(timeout time.Duration) error {
	return pollEmpty(timeout, fmt.Sprintf("group %d", t.ident.Pgid), func() (int, error) {
		pids, err := t.Members()
		return len(pids), err
	})
}

func (t *bsdTree) KillProcs(pids []int) error {
	if t.reaped {
		return nil
	}
	var errs []error
	for _, pid := range pids {
		// Only members of the (still anchored) group are signalled.
		if pg, err := unix.Getpgid(pid); err == nil && pg == t.ident.Pgid {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (t *bsdTree) Release(pids []int) error { return nil }

func (t *bsdTree) Close() error {
	<-t.exited
	t.reap()
	return nil
}

func holders(pids []int, files []*os.File) ([]int, error) { return nil, ErrUnsupported }

// OwnAllChildren has nothing to do without a child subreaper.
func OwnAllChildren() {}

// CgroupBase reports that there are no cgroups here.
func CgroupBase() (string, error) { return "", ErrUnsupported }

// Trees cannot be re-found here: without /proc start times a recorded pid
// cannot be told from a reused one, so nothing is signalled after a crash.
const canAdopt = false

func adoptLive(Identity) (Tree, error) { return nil, ErrUnsupported }

func adopt(ident Identity) (Orphan, error) {
	return nil, fmt.Errorf("re-finding a tree after a crash: %w", ErrUnsupported)
}

// processAlive cannot check a start time here; it reports a live pid as
// alive so reap never acts on a guess.
func processAlive(pid int, start uint64) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func selfStart() uint64 { return 0 }

// reclaimTerminal ignores SIGTTOU around the call: a process outside the
// terminal's foreground group that asks for it is otherwise stopped.
func reclaimTerminal(f *os.File) error {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.TIOCSPGRP, unix.Getpgrp())
}
