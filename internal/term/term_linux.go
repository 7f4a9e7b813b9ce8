package term

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

const (
	ioctlGetTermios = unix.TCGETS
	ioctlSetTermios = unix.TCSETS
)

// setForeground blocks SIGTTOU on this thread only, for the call: a
// background process asking for the terminal is otherwise stopped, and a
// blocked signal (unlike an ignored one) is not handed to a child started
// meanwhile by another thread.
func setForeground(f *os.File, pgid int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	n := uint(unix.SIGTTOU) - 1
	set.Val[n/64] |= 1 << (n % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return err
	}
	err := control(f, func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgid) })
	unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return err
}

// pollable returns f as a non-blocking file on the runtime's poller, and
// closes f: reads and writes on it then park a goroutine, not a thread,
// and Close or a deadline ends them. (creack/pty's files have been made
// blocking by its own Fd calls.) It must never be passed to Fd again,
// which would make it blocking: ioctls go through control.
func pollable(f *os.File) (*os.File, error) {
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

func cancelable(f *os.File) (*os.File, func(), error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	nf := os.NewFile(uintptr(fd), f.Name())
	return nf, func() {
		control(nf, func(fd int) error { return unix.SetNonblock(fd, false) })
		nf.Close()
	}, nil
}
