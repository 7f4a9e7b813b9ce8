package wire

import (
	"bufio"
	"io"
	"sync"
)

// A connection's read buffer (64 KiB, so that one read takes in a whole
// output or stdin frame) is held only while it holds unread bytes: a
// connection waiting for its peer's next frame reads the frame's header
// straight from the network, and takes a buffer from readBufs for the
// payload, which goes back once it has been read through. So an idle
// connection, of which a daemon holds many (each client keeps a few for
// reuse), holds no buffer: measured by cmd/corral's
// TestIdleConnectionMemory.

const readBufSize = 64 << 10

var readBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

// reader is c's read buffer, taken from the pool if c has none.
func (c *Conn) reader() *bufio.Reader {
	if c.r == nil {
		c.r = readBufs.Get().(*bufio.Reader)
		c.r.Reset(c.c)
	}
	return c.r
}

// release gives c's read buffer back if it holds no unread byte.
func (c *Conn) release() {
	if c.r != nil && c.r.Buffered() == 0 {
		c.r.Reset(nil)
		readBufs.Put(c.r)
		c.r = nil
	}
}

// Frames are built for writing in buffers of a pool too: an output frame
// a write (up to 64 KiB every few microseconds while a command streams),
// a fresh buffer each time cost the daemon its allocation, zeroing and
// garbage collection (BenchmarkRemoteOutput's profile).
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 5+MaxOutputChunk); return &b }}

// frameBuf returns a buffer of at least n bytes: a pooled one for an
// output-sized frame, else a new one.
func frameBuf(n int) []byte {
	if n > 5+MaxOutputChunk {
		return make([]byte, n)
	}
	return *frameBufs.Get().(*[]byte)
}

// putFrameBuf gives back what frameBuf returned.
func putFrameBuf(b []byte) {
	if cap(b) == 5+MaxOutputChunk {
		b = b[:cap(b)]
		frameBufs.Put(&b)
	}
}

// ReadFrameInto is ReadFrame into buf when the payload fits in it (else
// into a new slice): the payload is valid until the next read into buf.
// A reader of a stream of output frames uses one buffer for them all.
func (c *Conn) ReadFrameInto(max int, buf []byte) (byte, []byte, error) {
	h, err := c.ReadHeader()
	if err != nil {
		return 0, nil, err
	}
	if h.Len > cap(buf) || h.Len > max {
		b, err := c.ReadPayload(h, max)
		return h.Type, b, err
	}
	br := c.reader()
	defer c.release()
	b := buf[:h.Len]
	if _, err := io.ReadFull(br, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return h.Type, b, nil
}
