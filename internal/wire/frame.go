package wire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"
)

// Frame types. Letters, so that a frame dump is readable.
const (
	FrameHello   byte = 'H' // client: Hello
	FrameWelcome byte = 'W' // daemon: Welcome
	FrameCall    byte = 'C' // client: Call
	FrameReply   byte = 'R' // daemon: a call's reply, or an exec's Result
	FrameError   byte = 'E' // daemon: Error; ends a call
	FrameStdout  byte = '1' // daemon: output data
	FrameStderr  byte = '2' // daemon: output data
	FrameStdin   byte = 'i' // client: stdin data
	FrameEOF     byte = 'e' // client: stdin end of file
	FrameCancel  byte = 'x' // client: Cancel
	FrameKill    byte = 'k' // client: kill the tree at once
)

// Bounds of the protocol.
const (
	// Version is the newest protocol version this package speaks.
	Version = 2
	// VersionBytes is the first version whose peers read the _bytes
	// fields (bytes.go): a client refuses to send text that is not UTF-8
	// to an older daemon, which would run it changed.
	VersionBytes = 2
	// MaxControl bounds a control frame: an Exec carries the client's
	// environment (at most ARG_MAX, 2 MiB with the usual 8 MiB stack) and
	// a command of at most MaxCommand.
	MaxControl = 4 << 20
	// MaxReply bounds a reply frame from the daemon, the largest frame of
	// the protocol: a terminal screen with its whole scrollback (8 MiB of
	// text by default) in JSON. The daemon reads no frame over MaxControl
	// from a client.
	MaxReply = 64 << 20
	// MaxHello bounds the Hello frame.
	MaxHello = 64 << 10
	// MaxStdin bounds one stdin frame, so that what the daemon queues of
	// a command's stdin stays small (see internal/daemon/server).
	MaxStdin = 64 << 10
	// MaxOutputChunk bounds one output frame the daemon sends.
	MaxOutputChunk = 64 << 10
	// MaxCommand bounds the shell code of one command.
	MaxCommand = 1 << 20
	// HandshakeBound is how long a connection may take to send its Hello;
	// IdleBound how long one may stay without a call.
	HandshakeBound = 5 * time.Second
	IdleBound      = 5 * time.Minute
)

// ErrFrameTooLarge means a frame announced more than its bound.
var ErrFrameTooLarge = errors.New("frame over its bound")

// Conn is one end of a connection: it reads and writes frames. Reads are
// for one goroutine at a time; writes may come from several (each frame
// is written whole, under a lock). The caller owns the net.Conn. Its read
// buffer is held only while it holds unread bytes (readbuf.go).
type Conn struct {
	// Version is the protocol version agreed at the handshake, set by
	// the side that did it (0 before).
	Version int

	c  net.Conn
	r  *bufio.Reader
	wm sync.Mutex // guards wbuf and ordering of writes
	wb []byte
}

// NewConn wraps c.
func NewConn(c net.Conn) *Conn { return &Conn{c: c} }

// Net is the underlying connection.
func (c *Conn) Net() net.Conn { return c.c }

// Header is a frame's header, read before its payload.
type Header struct {
	Type byte
	Len  int
}

// ReadHeader reads the next frame's header.
func (c *Conn) ReadHeader() (Header, error) {
	var h [5]byte
	c.release()
	var r io.Reader = c.c // waiting for the peer: no buffer held
	if c.r != nil {
		r = c.r
	}
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Header{}, err
	}
	return Header{Type: h[0], Len: int(binary.BigEndian.Uint32(h[1:]))}, nil
}

// ReadPayload reads h's payload, which must be at most max bytes.
func (c *Conn) ReadPayload(h Header, max int) ([]byte, error) {
	if h.Len > max {
		return nil, fmt.Errorf("a %q frame of %d bytes (at most %d): %w", h.Type, h.Len, max, ErrFrameTooLarge)
	}
	// Grown as the bytes arrive: a peer that announces a large frame and
	// stalls holds only what it sent.
	b := make([]byte, 0, min(h.Len, 64<<10))
	br := c.reader()
	defer c.release()
	for len(b) < h.Len {
		if len(b) == cap(b) {
			b = append(b, make([]byte, min(h.Len-len(b), cap(b)))...)[:len(b)]
		}
		n, err := io.ReadFull(br, b[len(b):min(cap(b), h.Len)])
		b = b[:len(b)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// ReadFrame reads one frame of at most max bytes.
func (c *Conn) ReadFrame(max int) (byte, []byte, error) {
	h, err := c.ReadHeader()
	if err != nil {
		return 0, nil, err
	}
	b, err := c.ReadPayload(h, max)
	return h.Type, b, err
}

// Write writes one frame. It returns how many bytes of the frame (header
// included) were written, so that a writer cut off by a deadline can
// finish the frame later (WriteRest) and keep the stream whole: with an
// error, frame is the whole frame (the caller's own).
func (c *Conn) Write(typ byte, payload []byte) (frame []byte, n int, err error) {
	if len(payload) > MaxReply {
		return nil, 0, fmt.Errorf("a %q frame of %d bytes (at most %d): %w", typ, len(payload), MaxReply, ErrFrameTooLarge)
	}
	c.wm.Lock()
	defer c.wm.Unlock()
	buf := frameBuf(5 + len(payload)) // readbuf.go
	frame = buf[:5+len(payload)]
	frame[0] = typ
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(payload)))
	copy(frame[5:], payload)
	n, err = c.c.Write(frame)
	if err != nil {
		frame = append([]byte(nil), frame...) // the caller's to finish
	}
	putFrameBuf(buf)
	return frame, n, err
}

// WriteFrame writes one frame whole (or fails).
func (c *Conn) WriteFrame(typ byte, payload []byte) error {
	_, _, err := c.Write(typ, payload)
	return err
}

// WriteRest writes what is left of a frame a deadline cut off.
func (c *Conn) WriteRest(rest []byte) error {
	c.wm.Lock()
	defer c.wm.Unlock()
	_, err := c.c.Write(rest)
	return err
}

// WriteJSON writes v as one control frame.
func (c *Conn) WriteJSON(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.WriteFrame(typ, b)
}

// WriteError writes an Error frame.
func (c *Conn) WriteError(e *Error) error { return c.WriteJSON(FrameError, e) }

// Decode unmarshals a control frame's payload into v.
func Decode(payload []byte, v any) error {
	if err := json.Unmarshal(payload, v); err != nil {
		return &Error{Kind: KindBadRequest, Message: "malformed message: " + err.Error()}
	}
	return nil
}

// SocketPath is where the daemon of stateDir listens.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, "corral.sock") }
