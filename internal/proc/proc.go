// Package proc reads the facts corral needs about processes from /proc on
// Linux: a process's state, parent, group, session and start time (the
// identity that survives pid reuse), the boot id, the environment marker a
// tree's processes inherit, and the children of a process.
//
// Every reader tolerates a process that exits while it is being read: such a
// process is reported as gone (ErrGone), never as an error of the caller.
package proc

import (
	"errors"
)

// ErrGone means the process does not exist (any more).
var ErrGone = errors.New("process gone")

// Stat is the part of /proc/PID/stat that corral uses.
type Stat struct {
	Pid   int
	State byte // R, S, D, Z, T, t, X, ...
	Ppid  int
	Pgid  int
	Sid   int
	// StartTime is field 22: clock ticks after boot at which the process
	// started. Together with the boot id it names a process for ever.
	StartTime uint64
}

// Zombie reports whether the process has exited but not been reaped.
func (s Stat) Zombie() bool { return s.State == 'Z' || s.State == 'X' }
