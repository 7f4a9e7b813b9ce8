package holder

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/corral-dev/corral"
)

// The holder speaks frames on its socket: a type byte, a big-endian
// uint32 payload length, the payload. A connection carries one request
// (the first frame, FrameRequest) and its answer; an attach request turns
// the connection into a stream that lasts until the client detaches, the
// program exits or either side closes.
const (
	FrameRequest = 'q' // client: a JSON Request, the first frame
	FrameAnswer  = 'a' // holder: a JSON Answer
	FrameInput   = 'i' // client, attached: bytes for the program
	FrameResize  = 'r' // client, attached: a JSON Size
	FrameDetach  = 'd' // client, attached: detach (a FrameReset follows)
	FrameOutput  = 'o' // holder, attached: bytes for the client's terminal
	FrameResync  = 's' // holder, attached: output was dropped, a redraw follows
	FrameReset   = 'z' // holder, attached: bytes that undo the program's modes
	FrameExit    = 'x' // holder, attached: a JSON Status; the program has ended
)

// MaxFrame bounds a frame's payload; larger output is sent in pieces.
const MaxFrame = 1 << 20

// WriteFrame writes one frame (one writev on a socket).
func WriteFrame(w io.Writer, typ byte, p []byte) error {
	for {
		n := min(len(p), MaxFrame)
		var hdr [5]byte
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		bufs := net.Buffers{hdr[:], p[:n]}
		if _, err := bufs.WriteTo(w); err != nil {
			return err
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// WriteJSON writes v as one frame, or, past MaxFrame (a screen with a
// long scrollback), as several of the same type: each but the last is
// full, and a value whose length is a multiple of MaxFrame ends with an
// empty frame. ReadJSON reads it back.
func WriteJSON(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := WriteFrame(w, typ, b); err != nil {
		return err
	}
	if len(b) > 0 && len(b)%MaxFrame == 0 {
		return WriteFrame(w, typ, nil)
	}
	return nil
}

// MaxJSON bounds a value ReadJSON reads.
const MaxJSON = 64 << 20

// ReadJSON reads a value WriteJSON wrote: its frame type and its bytes.
func ReadJSON(r *bufio.Reader) (byte, []byte, error) {
	typ, p, err := ReadFrame(r, nil)
	if err != nil || len(p) < MaxFrame {
		return typ, p, err
	}
	b := p
	for {
		t, p, err := ReadFrame(r, nil)
		if err != nil {
			return 0, nil, err
		}
		if t != typ {
			return 0, nil, fmt.Errorf("a %q frame inside a %q value", t, typ)
		}
		if b = append(b, p...); len(b) > MaxJSON {
			return 0, nil, fmt.Errorf("a %q value of more than %d bytes", typ, MaxJSON)
		}
		if len(p) < MaxFrame {
			return typ, b, nil
		}
	}
}

// ReadFrame reads one frame; the payload is valid until the next call
// with the same buf (it is read into buf when it fits).
func ReadFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes is over the %d-byte bound", n, MaxFrame)
	}
	if int(n) > cap(buf) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("frame cut off: %w", io.ErrUnexpectedEOF)
	}
	return hdr[0], buf, nil
}

// Spec is what a holder is started with, as JSON on its standard input.
type Spec struct {
	// Dir is the session's directory: made private if missing, refused
	// if it is not ours alone; the socket and records go in it.
	Dir string `json:"dir"`
	// Path, Args, Env and Cwd are the program's (Env nil: the holder's).
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	// Cols and Rows are the window's size.
	Cols int `json:"cols"`
	Rows int `json:"rows"`
	// ScrollbackBytes is the scrollback's budget (0: 8 MiB).
	ScrollbackBytes int `json:"scrollback_bytes,omitempty"`
	// Isolation contains the program ("" picks the best).
	Isolation corral.Isolation `json:"isolation,omitempty"`
	// Grace is how long Close lets the program end after SIGTERM
	// (0: corral.DefaultGrace).
	Grace time.Duration `json:"grace,omitempty"`
}

// Ready is the one line a holder writes on its standard output once it
// serves (or has failed to start: then Error says why).
type Ready struct {
	Pid   int              `json:"pid,omitempty"`
	Tree  *corral.Identity `json:"tree,omitempty"`
	Error string           `json:"error,omitempty"`
}

// Request is the first frame of a connection.
type Request struct {
	Op string `json:"op"` // attach, send, screen, wait, resize, status, close
	// Data is what send writes to the program.
	Data []byte `json:"data,omitempty"`
	// Size is for resize, and for attach (0×0 keeps the size).
	Size Size `json:"size"`
	// Scrollback is how many scrollback rows attach redraws first, or
	// screen returns (-1: all).
	Scrollback int `json:"scrollback,omitempty"`
	// ANSI asks screen for the text with its attributes.
	ANSI bool `json:"ansi,omitempty"`
	// Wait says what wait waits for.
	Wait WaitSpec `json:"wait"`
}

// Size is a window size.
type Size struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// WaitSpec says what a wait returns on: the first of the screen matching
// Text (a regular expression, over the screen's rows joined by
// newlines), output quiet for Idle, the program's exit (Exit), or Timeout
// (0: no bound but the caller's).
type WaitSpec struct {
	Text    string        `json:"text,omitempty"`
	Idle    time.Duration `json:"idle,omitempty"`
	Exit    bool          `json:"exit,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Answer is the holder's reply to a request.
type Answer struct {
	Error  string  `json:"error,omitempty"`
	Screen *Screen `json:"screen,omitempty"`
	Status *Status `json:"status,omitempty"`
	// Reason is why a wait returned: text, idle, exit or timeout; Match
	// is the text that matched.
	Reason string `json:"reason,omitempty"`
	Match  string `json:"match,omitempty"`
}

// Screen is the current screen of a terminal session.
type Screen struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
	// Text is the screen's rows, trailing blanks trimmed, each ended by
	// a newline (as tmux capture-pane -p prints them); with ANSI, with
	// their attributes as SGR sequences.
	Text string `json:"text"`
	// Scrollback holds the newest scrollback rows asked for, oldest
	// first.
	Scrollback []string `json:"scrollback,omitempty"`
	// CursorX and CursorY are 0-based.
	CursorX       int    `json:"cursor_x"`
	CursorY       int    `json:"cursor_y"`
	CursorVisible bool   `json:"cursor_visible"`
	Title         string `json:"title,omitempty"`
	AltScreen     bool   `json:"alt_screen"`
	// AppCursor: the program asked for application cursor keys (DECCKM),
	// which send SS3 (ESC O A) rather than CSI (ESC [ A) sequences.
	AppCursor bool   `json:"app_cursor,omitempty"`
	Status    Status `json:"status"`
}

// Status is the state of a session's program.
type Status struct {
	// HolderPid is the holder's pid.
	HolderPid int `json:"holder_pid"`
	// Tree is the program's tree, as recorded before it ran.
	Tree corral.Identity `json:"tree"`
	// Exited is set once the program's tree has settled; then ExitCode
	// (-1 if it was killed) and Signal say how its root ended, and
	// Outcome and Error are those of corral's result.
	Exited   bool   `json:"exited"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Error    string `json:"error,omitempty"`
}
