package terminal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/corral-dev/corral/internal/term"
)

// DefaultDetachKey is ctrl-\ (as dtach and abduco use).
const DefaultDetachKey = 0x1c

// TerminalOptions says how AttachTerminal behaves.
type TerminalOptions struct {
	// DetachKey is the byte that detaches (0: DefaultDetachKey).
	// NoDetachKey disables detaching by key (the byte goes to the
	// program, as vim's users of ctrl-\ need).
	DetachKey   byte
	NoDetachKey bool
	// Scrollback is how many scrollback rows the redraw starts with.
	Scrollback int
	// ReadOnly sends none of the user's input (the detach key still
	// detaches).
	ReadOnly bool
}

// AttachTerminal attaches the user's terminal (input in, output out; both
// usually the same terminal) to the session: in goes into raw mode, the
// session takes out's size (and follows it on SIGWINCH), the current
// screen is drawn at once and the live output follows. It returns when
// the user presses the detach key (nil status: the program keeps
// running), when the program exits (its status), or when ctx ends. In
// every case the terminal is put back as it was: its modes restored, and
// the modes the program set on it (alternate screen, mouse, bracketed
// paste, kitty keyboard, cursor) reset.
func AttachTerminal(ctx context.Context, t *Term, in, out *os.File, o TerminalOptions) (*Status, error) {
	var att *Attachment
	open := func(ctx context.Context, cols, rows int) (Stream, error) {
		a, err := t.Attach(ctx, AttachOptions{Cols: cols, Rows: rows, Scrollback: o.Scrollback})
		att = a
		return a, err
	}
	exited, _, err := AttachStream(ctx, open, in, out, o)
	if err != nil || !exited {
		return nil, err
	}
	return att.Exit(), nil
}

// Stream is an attached client's connection to a session, straight to
// its holder (Attachment) or relayed by a daemon (the corral client's):
// Read gives the bytes for the client's terminal, a redraw first, and
// ends with io.EOF or ErrDetached (after the bytes that reset the
// terminal's modes); Write sends input.
type Stream interface {
	io.Reader
	io.Writer
	Resize(cols, rows int) error
	Detach() error
	Close() error
	// Exited reports, once Read has ended, whether the program exited
	// (else the client detached) and its exit code (-1: killed by a
	// signal).
	Exited() (bool, int)
}

// AttachStream is AttachTerminal for any Stream: open attaches at the
// terminal's size. It reports whether the program exited, and with what
// code, or that the user detached (false).
func AttachStream(ctx context.Context, open func(ctx context.Context, cols, rows int) (Stream, error), in, out *os.File, o TerminalOptions) (exited bool, code int, err error) {
	if !term.IsTerminal(in) {
		return false, 0, fmt.Errorf("attach: %s is not a terminal (use Send, Screen and Wait without one)", in.Name())
	}
	key := o.DetachKey
	if key == 0 {
		key = DefaultDetachKey
	}
	cols, rows, err := term.Size(out)
	if err != nil || cols == 0 || rows == 0 {
		cols, rows, err = term.Size(in)
	}
	if err != nil {
		return false, 0, fmt.Errorf("attach: the terminal's size: %w", err)
	}
	a, err := open(ctx, cols, rows)
	if err != nil {
		return false, 0, err
	}
	defer a.Close()
	saved, err := term.MakeRaw(in)
	if err != nil {
		return false, 0, err
	}
	defer term.Restore(in, saved)
	input, release, err := term.Cancelable(in)
	if err != nil {
		return false, 0, fmt.Errorf("attach: %w", err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	stop := make(chan struct{})
	defer close(stop)
	// Closing the cancelable input ends the input goroutine (Linux); it
	// runs after wg.Wait is deferred, so before it.
	defer func() {
		input.SetReadDeadline(time.Now())
	}()

	winch := make(chan os.Signal, 1)
	notifyWinch(winch)
	defer signal.Stop(winch)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-winch:
				if c, r, err := term.Size(out); err == nil {
					a.Resize(c, r)
				}
			case <-stop:
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer release()
		buf := make([]byte, 4096)
		for {
			n, err := input.Read(buf)
			if n > 0 {
				b := buf[:n]
				if i := indexByte(b, key); !o.NoDetachKey && i >= 0 {
					if !o.ReadOnly {
						a.Write(b[:i])
					}
					a.Detach()
					return
				}
				if !o.ReadOnly {
					a.Write(b)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	cancel := context.AfterFunc(ctx, func() { a.Detach() })
	defer cancel()
	_, err = io.Copy(out, a)
	if err != nil && !errors.Is(err, ErrDetached) {
		return false, 0, err
	}
	if exited, code := a.Exited(); exited {
		return true, code, nil
	}
	if ctx.Err() != nil {
		return false, 0, context.Cause(ctx)
	}
	return false, 0, nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
