package session

import "errors"

// FileID identifies a file by its device and inode numbers.
type FileID struct {
	Dev, Ino uint64
}

// Fifos identifies the named pipes made for a held shell (Config.HoldDir):
// its command channel and its stdout and stderr. Config.OnHeld gets them
// with the shell's identity, to be recorded with it; Attach, given them
// back in State.Fifos, refuses FIFOs that are not these.
type Fifos struct {
	Ctl, Out, Err FileID
}

// ErrNotOurs means a held session's directory or FIFOs are not what this
// process made for the shell: a symbolic link, something of another user's,
// something others can open, not a FIFO, or another FIFO than the one
// recorded. Attach refuses to take such a shell over and sends it nothing
// (whoever put the files there would read what is sent); it leaves the
// shell alone.
var ErrNotOurs = errors.New("not the held session's own files")
