//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// inForeground reports whether f is a terminal whose foreground process
// group is ours: then the command should get the terminal while it runs,
// as a shell's foreground job does.
func inForeground(f *os.File) bool {
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
