//go:build linux || darwin

package term

import (
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

type state struct{ t unix.Termios }

func openPTY(cols, rows int) (*os.File, *os.File, error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	if err := setSize(m, cols, rows); err != nil {
		m.Close()
		s.Close()
		return nil, nil, err
	}
	pm, err := pollable(m)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return pm, s, nil
}

// control runs fn on f's descriptor without changing its blocking mode.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func setSize(f *os.File, cols, rows int) error {
	return control(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
}

func size(f *os.File) (int, int, error) {
	var ws *unix.Winsize
	err := control(f, func(fd int) (err error) {
		ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return int(ws.Col), int(ws.Row), nil
}

func isTerminal(f *os.File) bool {
	return control(f, func(fd int) error {
		_, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
		return err
	}) == nil
}

func makeRaw(f *os.File) (state, error) {
	var old unix.Termios
	err := control(f, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
		if err != nil {
			return err
		}
		old = *t
		raw(t)
		return unix.IoctlSetTermios(fd, ioctlSetTermios, t)
	})
	return state{t: old}, err
}

// raw changes t as cfmakeraw(3) does.
func raw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}

func restore(f *os.File, s state) error {
	return control(f, func(fd int) error { return unix.IoctlSetTermios(fd, ioctlSetTermios, &s.t) })
}

func setControlling(f *os.File) error {
	return control(f, func(fd int) error { return unix.IoctlSetInt(fd, unix.TIOCSCTTY, 0) })
}

func foreground(f *os.File) (int, error) {
	var pg int
	err := control(f, func(fd int) (err error) {
		pg, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pg, err
}
