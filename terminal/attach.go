package terminal

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/corral-dev/corral/internal/holder"
)

// ErrDetached is returned by Attachment.Read after a detach, once the
// bytes that reset the client's terminal have been read.
var ErrDetached = errors.New("detached from terminal session")

// AttachOptions says how to attach.
type AttachOptions struct {
	// Cols and Rows, if set, resize the session to the client's size
	// before the redraw.
	Cols, Rows int
	// Scrollback is how many scrollback rows the redraw starts with
	// (-1: all), so that they enter the client terminal's scrollback.
	Scrollback int
}

// Attachment is an attached client: Read gives the bytes to show on the
// client's terminal (a redraw of the current screen first, then the live
// output), Write sends input. Read is for one goroutine; Write, Resize,
// Detach and Close may be called from any.
type Attachment struct {
	conn net.Conn
	r    *bufio.Reader
	buf  []byte
	pend []byte
	// end is the error Read returns once pend is empty: io.EOF after the
	// program exited, ErrDetached after a detach.
	end     error
	exit    *Status
	resyncs int

	wmu sync.Mutex
}

// Attach attaches to the session. The first Read gives the redraw.
func (t *Term) Attach(ctx context.Context, o AttachOptions) (*Attachment, error) {
	conn, r, err := t.dial(ctx, holder.Request{Op: "attach", Size: holder.Size{Cols: o.Cols, Rows: o.Rows}, Scrollback: o.Scrollback})
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	a, err := readAnswer(r)
	stop()
	if err == nil && a.Error != "" {
		err = fmt.Errorf("%w: %s", ErrHolder, a.Error)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("terminal session %s: attach: %w", t.dir, err)
	}
	return &Attachment{conn: conn, r: r, buf: make([]byte, 32<<10)}, nil
}

// Read reads output for the client's terminal. After the program exits
// it returns the remaining output, the bytes that reset the terminal's
// modes, then io.EOF (Exit then has the status); after Detach, the reset
// bytes, then ErrDetached.
func (a *Attachment) Read(p []byte) (int, error) {
	for len(a.pend) == 0 {
		if a.end != nil {
			return 0, a.end
		}
		typ, b, err := holder.ReadFrame(a.r, a.buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: the connection closed", ErrGone)
			}
			a.end = err
			continue
		}
		switch typ {
		case holder.FrameOutput:
			a.pend = b
		case holder.FrameResync:
			a.resyncs++
		case holder.FrameReset:
			a.pend = b
			a.end = ErrDetached // unless an exit frame follows
			if typ, b, err := holder.ReadFrame(a.r, a.buf[len(b):cap(a.buf)]); err == nil && typ == holder.FrameExit {
				var st Status
				if json.Unmarshal(b, &st) == nil {
					a.exit = &st
				}
				a.end = io.EOF
			}
		case holder.FrameExit:
			var st Status
			if json.Unmarshal(b, &st) == nil {
				a.exit = &st
			}
			a.end = io.EOF
		}
	}
	n := copy(p, a.pend)
	a.pend = a.pend[n:]
	return n, nil
}

// Resyncs counts the times this client fell behind and was sent a redraw
// of the current screen in place of the output it missed.
func (a *Attachment) Resyncs() int { return a.resyncs }

// Exit is the program's status once Read has returned io.EOF, else nil.
func (a *Attachment) Exit() *Status { return a.exit }

// Exited reports whether the program exited (Read has returned io.EOF)
// and its exit code (Stream).
func (a *Attachment) Exited() (bool, int) {
	if a.exit == nil {
		return false, 0
	}
	return true, a.exit.ExitCode
}

// Write sends p to the program as input.
func (a *Attachment) Write(p []byte) (int, error) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	for off := 0; off < len(p); off += holder.MaxFrame {
		if err := holder.WriteFrame(a.conn, holder.FrameInput, p[off:min(len(p), off+holder.MaxFrame)]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// Resize resizes the session to the client's new size.
func (a *Attachment) Resize(cols, rows int) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return holder.WriteJSON(a.conn, holder.FrameResize, holder.Size{Cols: cols, Rows: rows})
}

// Detach asks to detach, leaving the program running: Read then returns
// the output still queued, the bytes that reset the modes the program set
// on the client's terminal, and ErrDetached.
func (a *Attachment) Detach() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return holder.WriteFrame(a.conn, holder.FrameDetach, nil)
}

// Close drops the connection at once (no reset bytes are read); the
// program keeps running.
func (a *Attachment) Close() error { return a.conn.Close() }
