package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/corral-dev/corral/internal/wire"
)

// Terminal sessions: programs on a PTY that the daemon keeps, driven by
// keys and screens (TermSend, TermScreen, TermWait) or attached to
// (TermAttach). See the terminal package for what a session is.

// TermOpenOptions says how a terminal session is opened.
type TermOpenOptions struct {
	// Command is the program and its arguments (nil: the user's shell).
	Command []string
	// Cwd is the program's working directory ("": this process's, for a
	// local daemon; the daemon's / for a remote one, which needs an
	// absolute path of its machine).
	Cwd string
	// Env holds NAME=value entries added to the program's environment:
	// to this process's environment (with TERM=xterm-256color, what the
	// session's screen speaks) for a local daemon, to nothing but TERM
	// for a remote one.
	Env []string
	// Cols and Rows are the window's size (0: 80×24).
	Cols, Rows int
	// SizePolicy is whose size the window takes as clients attach:
	// "typed" (""; the most recent client that typed), "smallest",
	// "largest" or "fixed".
	SizePolicy string
	// Existing makes an existing terminal session of that name no error:
	// it is joined (and started again if it is down), as attach does.
	Existing bool
}

// TermOpened says what TermOpen did.
type TermOpened struct {
	Name string
	// Created: a new session; Started: a holder was started for it (new,
	// or one that was down).
	Created, Started bool
	HolderPid        int
	Cols, Rows       int
	Command          []string
}

// TermStatus is the state of a terminal session's program.
type TermStatus struct {
	HolderPid int
	// Pid is the program's pid while it runs.
	Pid int
	// Exited is set once the program's tree has settled: ExitCode (-1:
	// killed by Signal), Outcome and Error say how.
	Exited   bool
	ExitCode int
	Signal   int
	Outcome  string
	Error    string
}

// TermScreen is a terminal session's current screen.
type TermScreen struct {
	Cols, Rows int
	// Text is the screen's rows, trailing blanks trimmed, each ended by a
	// newline; with ANSI, with their attributes as SGR sequences.
	Text string
	// Scrollback holds the newest scrollback rows asked for, oldest first.
	Scrollback []string
	// CursorX and CursorY are 0-based.
	CursorX, CursorY int
	CursorVisible    bool
	Title            string
	AltScreen        bool
	Status           TermStatus
}

// TermScreenOptions says what TermScreen gives besides the visible rows.
type TermScreenOptions struct {
	ANSI bool
	// Scrollback is how many of the newest scrollback rows to include
	// (-1: all).
	Scrollback int
}

// TermWaitOptions says what TermWait waits for: the first of the screen
// matching Text (a regular expression; ^ and $ match at each row), output
// quiet for Idle, or the program's exit; Timeout bounds it (0: the
// daemon's bound, a day).
type TermWaitOptions struct {
	Text    string
	Idle    time.Duration
	Exit    bool
	Timeout time.Duration
}

// TermWaited says why TermWait returned: Reason is text, idle, exit or
// timeout (no error: the caller decides); Match is what matched.
type TermWaited struct {
	Reason string
	Match  string
	Status TermStatus
}

func termStatus(s wire.TermStatus) TermStatus {
	return TermStatus{HolderPid: s.HolderPid, Pid: s.Pid, Exited: s.Exited, ExitCode: s.ExitCode, Signal: s.Signal,
		Outcome: s.Outcome, Error: s.Error}
}

// TermOpen opens the terminal session name.
func (c *Client) TermOpen(ctx context.Context, name string, o TermOpenOptions) (*TermOpened, error) {
	t := &wire.Term{Name: name, Command: o.Command, Cols: o.Cols, Rows: o.Rows, SizePolicy: o.SizePolicy, Existing: o.Existing}
	remote := c.addr != ""
	switch {
	case o.Cwd != "" && remote:
		if !filepath.IsAbs(o.Cwd) {
			return nil, fmt.Errorf("%w: cwd %s: a remote daemon needs an absolute path (of its machine)", ErrBadRequest, o.Cwd)
		}
		t.Cwd = o.Cwd
	case o.Cwd != "":
		abs, err := filepath.Abs(o.Cwd)
		if err != nil {
			return nil, fmt.Errorf("%w: cwd %s: %v", ErrBadRequest, o.Cwd, err)
		}
		t.Cwd = abs
	case !remote:
		t.Cwd, _ = os.Getwd()
	}
	var env []string
	if !remote {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "TERM=") {
				env = append(env, kv)
			}
		}
	}
	env = append(env, "TERM=xterm-256color")
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("%w: environment entry %q: want NAME=value", ErrBadRequest, kv)
		}
	}
	t.Env = append(env, o.Env...)
	for _, s := range append(append([]string{name, t.Cwd}, t.Command...), t.Env...) {
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("%w: %q is not UTF-8 (names, commands, paths and environments travel as UTF-8)", ErrBadRequest, s)
		}
	}
	var r wire.TermOpened
	if err := c.call(ctx, wire.Call{Call: wire.CallTermOpen, Term: t}, &r); err != nil {
		return nil, err
	}
	return &TermOpened{Name: r.Name, Created: r.Created, Started: r.Started, HolderPid: r.HolderPid, Cols: r.Cols, Rows: r.Rows, Command: r.Command}, nil
}

// TermSend types data into the session's program.
func (c *Client) TermSend(ctx context.Context, name string, data []byte) error {
	return c.TermSendKeys(ctx, name, data, nil)
}

// TermSendKeys types text, then presses keys named in tmux's notation
// (Enter, C-c, Up, F1, M-x...: see terminal.Keys), which the daemon sends
// as the program's cursor-key mode asks (application cursor keys send
// ESC O A for Up).
//
// Text larger than one call carries (the wire bounds a call; base64 grows
// bytes by a third) is sent in several calls, in order, the keys with the
// last; another client's input may come between two of them.
func (c *Client) TermSendKeys(ctx context.Context, name string, text []byte, keys []string) error {
	for {
		n := min(len(text), maxTermSendChunk)
		var k []string
		if n == len(text) {
			k = keys
		}
		var r struct{}
		if err := c.call(ctx, wire.Call{Call: wire.CallTermSend, Term: &wire.Term{Name: name, Data: text[:n], Keys: k}}, &r); err != nil {
			return err
		}
		if text = text[n:]; len(text) == 0 {
			return nil
		}
	}
}

// maxTermSendChunk is the most text one term_send call carries: its
// base64 stays well inside wire.MaxControl.
const maxTermSendChunk = wire.MaxControl / 2

// TermScreen returns the session's current screen.
func (c *Client) TermScreen(ctx context.Context, name string, o TermScreenOptions) (*TermScreen, error) {
	var r wire.TermScreen
	if err := c.call(ctx, wire.Call{Call: wire.CallTermScreen, Term: &wire.Term{Name: name, ANSI: o.ANSI, Scrollback: o.Scrollback}}, &r); err != nil {
		return nil, err
	}
	return &TermScreen{Cols: r.Cols, Rows: r.Rows, Text: r.Text, Scrollback: r.Scrollback, CursorX: r.CursorX, CursorY: r.CursorY,
		CursorVisible: r.CursorVisible, Title: r.Title, AltScreen: r.AltScreen, Status: termStatus(r.Status)}, nil
}

// TermWait waits as o says. Cancelling ctx ends the wait (the daemon sees
// the connection close).
func (c *Client) TermWait(ctx context.Context, name string, o TermWaitOptions) (*TermWaited, error) {
	var r wire.TermWaited
	t := &wire.Term{Name: name, Text: o.Text, IdleMs: o.Idle.Milliseconds(), Exit: o.Exit, TimeoutMs: o.Timeout.Milliseconds()}
	if o.Idle > 0 && t.IdleMs == 0 {
		t.IdleMs = 1
	}
	if o.Timeout > 0 && t.TimeoutMs == 0 {
		t.TimeoutMs = 1
	}
	if !utf8.ValidString(o.Text) {
		return nil, fmt.Errorf("%w: the text pattern is not UTF-8", ErrBadRequest)
	}
	if err := c.call(ctx, wire.Call{Call: wire.CallTermWait, Term: t}, &r); err != nil {
		return nil, err
	}
	return &TermWaited{Reason: r.Reason, Match: r.Match, Status: termStatus(r.Status)}, nil
}

// TermResize sets the session's window size.
func (c *Client) TermResize(ctx context.Context, name string, cols, rows int) error {
	var r struct{}
	return c.call(ctx, wire.Call{Call: wire.CallTermResize, Term: &wire.Term{Name: name, Cols: cols, Rows: rows}}, &r)
}

// TermAttachOptions says how to attach.
type TermAttachOptions struct {
	// Cols and Rows are this client's terminal size (0: none).
	Cols, Rows int
	// ReadOnly sends none of this client's input or size.
	ReadOnly bool
	// Scrollback is how many scrollback rows the redraw starts with.
	Scrollback int
}

// TermAttachment is a client attached to a terminal session through the
// daemon: Read gives the bytes to write to the client's terminal as they
// are (a redraw of the screen first, the live output, at the end the
// bytes that reset the modes the program set) and returns io.EOF once the
// client has detached or the program has exited (Exited says which);
// Write sends input. Read is for one goroutine; Write, Resize, Detach and
// Close may be called from any. Close it when done: it owns a connection
// of its own.
type TermAttachment struct {
	wc   *wire.Conn
	pend []byte
	end  error
	ended
	wmu sync.Mutex
	// Opened is the session as the attach found it.
	Opened TermOpened
}

type ended struct {
	exited bool
	status TermStatus
}

// TermAttach attaches to the live session name.
func (c *Client) TermAttach(ctx context.Context, name string, o TermAttachOptions) (*TermAttachment, error) {
	wc, err := c.send(ctx, wire.Call{Call: wire.CallTermAttach, Term: &wire.Term{Name: name, Cols: o.Cols, Rows: o.Rows,
		ReadOnly: o.ReadOnly, Scrollback: o.Scrollback}})
	if err != nil {
		return nil, err
	}
	nc := wc.Net()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	typ, b, err := wc.ReadFrame(wire.MaxControl)
	stopped := stop()
	if err != nil || !stopped {
		nc.Close()
		if err == nil {
			err = context.Cause(ctx)
		}
		return nil, c.broken(ctx, err)
	}
	var r wire.TermOpened
	switch typ {
	case wire.FrameReply:
		if err := wire.Decode(b, &r); err != nil {
			nc.Close()
			return nil, err
		}
	case wire.FrameError:
		nc.Close()
		return nil, decodeError(b)
	default:
		nc.Close()
		return nil, fmt.Errorf("the daemon answered a term_attach call with a %q frame", typ)
	}
	return &TermAttachment{wc: wc, Opened: TermOpened{Name: r.Name, HolderPid: r.HolderPid, Cols: r.Cols, Rows: r.Rows}}, nil
}

// Read reads output for the client's terminal.
func (a *TermAttachment) Read(p []byte) (int, error) {
	for len(a.pend) == 0 {
		if a.end != nil {
			return 0, a.end
		}
		typ, b, err := a.wc.ReadFrame(wire.MaxControl)
		if err != nil {
			a.end = &lostError{err}
			continue
		}
		switch typ {
		case wire.FrameTermOutput:
			a.pend = b
		case wire.FrameReply:
			var e wire.TermEnded
			if err := wire.Decode(b, &e); err != nil {
				a.end = err
				continue
			}
			a.exited, a.status = e.Status.Exited, termStatus(e.Status)
			a.end = io.EOF
		case wire.FrameError:
			a.end = decodeError(b)
		default:
			a.end = fmt.Errorf("the daemon sent a %q frame during an attach", typ)
		}
	}
	n := copy(p, a.pend)
	a.pend = a.pend[n:]
	return n, nil
}

// Exited reports, once Read has returned io.EOF, whether the program
// exited (else the client detached) and its exit code.
func (a *TermAttachment) Exited() (bool, int) { return a.exited, a.status.ExitCode }

// Status is the program's status once Read has returned io.EOF after
// its exit.
func (a *TermAttachment) Status() TermStatus { return a.status }

// Write sends p to the program as input.
func (a *TermAttachment) Write(p []byte) (int, error) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	for off := 0; off < len(p); off += wire.MaxStdin {
		if err := a.wc.WriteFrame(wire.FrameStdin, p[off:min(len(p), off+wire.MaxStdin)]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// Resize says the client's terminal has a new size.
func (a *TermAttachment) Resize(cols, rows int) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.wc.WriteJSON(wire.FrameTermResize, wire.TermSize{Cols: cols, Rows: rows})
}

// Detach asks to detach, leaving the program running: Read then gives
// the output still queued and the reset bytes, then io.EOF.
func (a *TermAttachment) Detach() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.wc.WriteFrame(wire.FrameTermDetach, nil)
}

// Close drops the attachment's connection (the program keeps running).
func (a *TermAttachment) Close() error {
	err := a.wc.Net().Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// TermInfo is what a listing says of a terminal session.
type TermInfo struct {
	Command    []string
	Cols, Rows int
	SizePolicy string
	HolderPid  int
	// Exited and ExitCode say how its program ended (its last screen is
	// kept until the session is killed).
	Exited   bool
	ExitCode int
}

func termInfo(t *wire.TermInfo) *TermInfo {
	if t == nil {
		return nil
	}
	return &TermInfo{Command: t.Command, Cols: t.Cols, Rows: t.Rows, SizePolicy: t.SizePolicy, HolderPid: t.HolderPid,
		Exited: t.Exited, ExitCode: t.ExitCode}
}

// kindOf is a listed session's kind: a daemon from before terminal
// sessions sends none, and has only exec sessions.
func kindOf(k string) string {
	if k == "" {
		return "exec"
	}
	return k
}
