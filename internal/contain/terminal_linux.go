package contain

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// reclaimTerminal blocks SIGTTOU on this thread only while it asks for the
// terminal: a process outside the terminal's foreground group that asks for
// it is otherwise stopped, and blocking (unlike ignoring) is not inherited
// by any child started meanwhile.
func reclaimTerminal(f *os.File) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	set.Val[0] = 1 << (uint(unix.SIGTTOU) - 1)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return err
	}
	err := unix.IoctlSetPointerInt(int(f.Fd()), unix.TIOCSPGRP, unix.Getpgrp())
	unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return err
}
