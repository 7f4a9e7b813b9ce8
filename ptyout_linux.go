package corral

import (
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openOutputPTY makes the pseudo-terminal a root writes its output to when
// Cmd.OutputTTY is set: of tty's size, with output processing off (the
// terminal the bytes are relayed to turns "\n" into "\r\n" itself).
func openOutputPTY(tty *os.File) (master, slave *os.File, err error) {
	if _, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil {
		return nil, nil, err // not a terminal
	}
	master, slave, err = pty.Open()
	if err != nil {
		return nil, nil, err
	}
	if sz, err := pty.GetsizeFull(tty); err == nil {
		pty.Setsize(master, sz)
	}
	if t, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err == nil {
		t.Oflag &^= unix.OPOST
		unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, t)
	}
	return master, slave, nil
}

// dupFile is a descriptor of f's own.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// followSize copies tty's size to the pseudo-terminal at each resize,
// until stop; master is its own descriptor, closed then. It closes ended
// when it returns.
func followSize(master, tty *os.File, resize <-chan struct{}, stop <-chan struct{}, ended chan<- struct{}) {
	defer close(ended)
	defer master.Close()
	for {
		select {
		case <-stop:
			return
		case <-resize:
			if sz, err := pty.GetsizeFull(tty); err == nil {
				pty.Setsize(master, sz) // the kernel sends the tree SIGWINCH
			}
		}
	}
}
