// Package term is the terminal layer under terminal sessions: it opens a
// PTY pair at a size, reads and sets a terminal's window size, puts a
// user's terminal in raw mode and restores it, makes a PTY the
// controlling terminal of a session leader, and hands a terminal's
// foreground to a process group and back.
//
// It works on Linux and macOS. Elsewhere every function returns an error
// wrapping ErrUnsupported: a terminal session cannot be held there.
//
// creack/pty opens the pair; the termios work is done here on
// golang.org/x/sys/unix (about forty lines, the same few ioctls
// golang.org/x/term makes), which keeps the holder free of another module.
package term

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrUnsupported means this platform has no PTYs corral can hold.
var ErrUnsupported = errors.New("terminal sessions are not supported on this platform (Linux and macOS only)")

// MaxSize bounds a window's columns and rows: a bigger size is refused
// rather than have the screen model allocate it.
const MaxSize = 4096

// CheckSize reports whether cols×rows is a size a terminal session can
// have, with an error that says what is allowed.
func CheckSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > MaxSize || rows > MaxSize {
		return fmt.Errorf("terminal size %dx%d: columns and rows must be between 1 and %d", cols, rows, MaxSize)
	}
	return nil
}

// ParseSize parses a window size written COLSxROWS (120x40; the x in
// either case), as the CLI and the MCP server take it, and checks it as
// CheckSize does. The error names s and says what is wanted.
func ParseSize(s string) (cols, rows int, err error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	cols, err1 := strconv.Atoi(a)
	rows, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("size %q: want COLSxROWS, like 120x40", s)
	}
	if err := CheckSize(cols, rows); err != nil {
		return 0, 0, fmt.Errorf("size %q: %v", s, err)
	}
	return cols, rows, nil
}

// OpenPTY opens a new PTY pair whose window is cols×rows. The caller owns
// both files. The slave is opened without becoming anyone's controlling
// terminal (see SetControlling).
func OpenPTY(cols, rows int) (master, slave *os.File, err error) {
	if err := CheckSize(cols, rows); err != nil {
		return nil, nil, err
	}
	return openPTY(cols, rows)
}

// SetSize sets the window size of the terminal f (a PTY master or slave):
// the kernel sends SIGWINCH to its foreground process group.
func SetSize(f *os.File, cols, rows int) error {
	if err := CheckSize(cols, rows); err != nil {
		return err
	}
	return setSize(f, cols, rows)
}

// Size returns the window size of the terminal f.
func Size(f *os.File) (cols, rows int, err error) { return size(f) }

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return isTerminal(f) }

// State is a terminal's settings as MakeRaw found them.
type State struct{ st state }

// MakeRaw puts the terminal f in raw mode (no echo, no line editing, no
// signals from keys, no output processing, 8-bit) and returns its previous
// state for Restore. The caller must restore it whatever happens.
func MakeRaw(f *os.File) (*State, error) {
	st, err := makeRaw(f)
	if err != nil {
		return nil, fmt.Errorf("raw mode on %s: %w", f.Name(), err)
	}
	return &State{st: st}, nil
}

// Restore puts the terminal f back in the state MakeRaw found it in.
func Restore(f *os.File, s *State) error {
	if s == nil {
		return nil
	}
	if err := restore(f, s.st); err != nil {
		return fmt.Errorf("restore terminal %s: %w", f.Name(), err)
	}
	return nil
}

// SetControlling makes the terminal f the controlling terminal of this
// process's session. This process must be a session leader without a
// controlling terminal (a holder, right after setsid).
func SetControlling(f *os.File) error {
	if err := setControlling(f); err != nil {
		return fmt.Errorf("make %s the controlling terminal: %w", f.Name(), err)
	}
	return nil
}

// SetForeground makes pgid the foreground process group of the terminal
// f, which must be this process's controlling terminal. It works from a
// background group too (SIGTTOU is blocked on the calling thread for the
// call, not ignored: a child started meanwhile inherits nothing).
func SetForeground(f *os.File, pgid int) error {
	if err := setForeground(f, pgid); err != nil {
		return fmt.Errorf("give terminal %s to group %d: %w", f.Name(), pgid, err)
	}
	return nil
}

// Foreground returns the foreground process group of the terminal f.
func Foreground(f *os.File) (int, error) { return foreground(f) }

// Cancelable returns a second file on the terminal f whose reads a
// deadline or Close can end (Linux: it is put on the runtime's poller,
// which makes the terminal's open file non-blocking), and a func that
// closes it and puts the terminal back in blocking mode: call it before
// the terminal is handed back (a shell reading a non-blocking terminal
// gets EAGAIN). Where the poller cannot take terminals (macOS) the file
// is a plain duplicate whose Read ends only with input.
func Cancelable(f *os.File) (*os.File, func(), error) { return cancelable(f) }
