package holder

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/corral-dev/corral/internal/vt"
)

// attach serves an attached client: its redraw, then live output from its
// queue; its input, resizes and detach from its frames.
func (h *holder) attach(conn net.Conn, r *bufio.Reader, req *Request) {
	if req.Size.Cols != 0 || req.Size.Rows != 0 {
		if err := h.resize(req.Size); err != nil {
			WriteJSON(conn, FrameAnswer, Answer{Error: err.Error()})
			return
		}
	}
	c := newClient()
	h.mu.Lock()
	st := h.status
	// The client is registered where the screen model has caught up
	// with the output forwarded: every chunk it is sent after the redraw
	// came after it.
	if st.Exited {
		c.ended, c.status = true, st
	} else {
		h.catchUpLocked(func() { h.out.clients[c] = struct{}{} })
	}
	redraw := h.vt.Redraw(vt.RedrawOptions{Scrollback: req.Scrollback})
	h.mu.Unlock()
	defer func() {
		h.out.mu.Lock()
		delete(h.out.clients, c)
		h.out.mu.Unlock()
	}()
	if WriteJSON(conn, FrameAnswer, Answer{Status: &st}) != nil || WriteFrame(conn, FrameOutput, redraw) != nil {
		return
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		h.clientWriter(conn, c)
	}()
	// The client's input goes to the program from a goroutine of its
	// own, so that this reader goes on reading frames (a detach) while a
	// program that reads nothing holds up its input.
	in := &attachInput{stop: make(chan struct{})}
	in.cond.L = &in.mu
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		h.writeAttachInput(in)
	}()
	defer func() {
		// What is queued still goes, for a moment: the program may be
		// about to read it.
		in.close()
		select {
		case <-inDone:
		case <-time.After(attachInputLinger):
			close(in.stop)
			<-inDone
		}
	}()
	dropped := false
	buf := make([]byte, 32<<10)
	for {
		typ, p, err := ReadFrame(r, buf)
		if err != nil {
			break
		}
		switch typ {
		case FrameInput:
			if !in.put(append([]byte(nil), p...)) && !dropped {
				dropped = true // logged once per client
				fmt.Fprintf(os.Stderr, "holder: dropped %d bytes of an attached client's input: the program has not read the %d before them\n", len(p), maxAttachInput)
			}
		case FrameResize:
			var sz Size
			if json.Unmarshal(p, &sz) == nil {
				h.resize(sz)
			}
		case FrameDetach:
			c.set(&c.detach)
		}
	}
	c.set(&c.gone)
	conn.Close()
	<-done
}

// clientWriter sends c's queue to conn until the client detaches, the
// program ends or the connection fails; it alone writes to conn after the
// redraw.
func (h *holder) clientWriter(conn net.Conn, c *client) {
	defer conn.Close()
	for {
		c.mu.Lock()
		for len(c.q) == 0 && !c.behind && !c.detach && !c.ended && !c.gone {
			c.cond.Wait()
		}
		q, behind, detach, ended, gone, st := c.q, c.behind, c.detach, c.ended, c.gone, c.status
		c.q, c.qBytes = nil, 0
		c.mu.Unlock()
		switch {
		case gone:
			return
		case behind:
			// Dropped: redraw from the screen model, and take output
			// from the queue again from the same moment.
			h.mu.Lock()
			h.catchUpLocked(func() {
				c.mu.Lock()
				c.behind, c.q, c.qBytes = false, nil, 0
				c.resyncs++
				c.mu.Unlock()
			})
			redraw := h.vt.Redraw(vt.RedrawOptions{})
			h.mu.Unlock()
			if WriteFrame(conn, FrameResync, nil) != nil || WriteFrame(conn, FrameOutput, redraw) != nil {
				return
			}
			continue
		case len(q) > 0:
			if writeChunks(conn, q) != nil {
				return
			}
			continue
		}
		// The queue is empty: what was asked for last can be done.
		h.mu.Lock()
		reset := h.vt.Reset()
		h.mu.Unlock()
		if detach || ended {
			if WriteFrame(conn, FrameReset, reset) != nil {
				return
			}
		}
		if ended && !detach {
			WriteJSON(conn, FrameExit, st)
		}
		return
	}
}

// writeChunks writes q as output frames in one writev.
func writeChunks(conn net.Conn, q [][]byte) error {
	bufs := make(net.Buffers, 0, 2*len(q))
	for _, b := range q {
		hdr := []byte{FrameOutput, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}
		bufs = append(bufs, hdr, b)
	}
	_, err := bufs.WriteTo(conn)
	return err
}

// maxAttachInput bounds the input of one attached client that the
// program has not read yet; past it, input is dropped (and logged).
const maxAttachInput = 4 << 20

// attachInputLinger is how long input still queued when a client goes
// may wait for the program.
const attachInputLinger = 2 * time.Second

// attachInput is one attached client's input on its way to the program.
type attachInput struct {
	stop chan struct{} // closed: what is queued is dropped
	// mu guards the fields that follow.
	mu     sync.Mutex
	cond   sync.Cond
	q      [][]byte
	qBytes int
	closed bool
}

// put queues b, or reports that it would pass the bound (once the
// writer has ended, b is dropped: the program is gone).
func (in *attachInput) put(b []byte) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return true
	}
	if in.qBytes+len(b) > maxAttachInput {
		return false
	}
	in.q = append(in.q, b)
	in.qBytes += len(b)
	in.cond.Signal()
	return true
}

func (in *attachInput) close() {
	in.mu.Lock()
	in.closed = true
	in.cond.Signal()
	in.mu.Unlock()
}

// writeAttachInput sends in's input to the program, in order, until in
// is closed and empty or stopped.
func (h *holder) writeAttachInput(in *attachInput) {
	for {
		in.mu.Lock()
		for len(in.q) == 0 && !in.closed {
			in.cond.Wait()
		}
		if len(in.q) == 0 {
			in.mu.Unlock()
			return
		}
		b := in.q[0]
		in.q = in.q[1:]
		in.mu.Unlock()
		err := h.send(in.stop, b)
		in.mu.Lock()
		in.qBytes -= len(b)
		in.mu.Unlock()
		if err != nil {
			in.close()
			return
		}
	}
}
