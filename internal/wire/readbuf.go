package wire

import (
	"bufio"
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
