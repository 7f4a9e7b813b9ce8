package term

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	ioctlGetTermios = unix.TIOCGETA
	ioctlSetTermios = unix.TIOCSETA
)

// setForeground ignores SIGTTOU around the call (x/sys has no
// pthread_sigmask for macOS), as contain's reclaimTerminal does there.
func setForeground(f *os.File, pgid int) error {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	return control(f, func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgid) })
}

// pollable leaves f as it is: macOS's kqueue does not take terminals, so
// the runtime cannot poll a PTY there and its reads block a thread.
func pollable(f *os.File) (*os.File, error) { return f, nil }

func cancelable(f *os.File) (*os.File, func(), error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, nil, err
	}
	unix.CloseOnExec(fd)
	nf := os.NewFile(uintptr(fd), f.Name())
	return nf, func() { nf.Close() }, nil
}
