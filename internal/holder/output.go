package holder

import (
	"runtime"
	"sync"
	"time"
)

// The program's output takes two paths from the PTY. The reader
// (readPTY) forwards each batch to the attached clients' queues at once
// and appends it to out.pending; the feeder (feed) writes what is pending
// into the screen model on its own goroutine. So the clients see output
// without waiting for the screen model, the model takes its input in
// large batches, and the reader and the model run on two cores.
//
// Whoever needs the screen model to be current (a redraw, a screen, a
// resize) holds mu and calls catchUpLocked, which feeds what is pending
// first. A client is registered, or resumed after a resync, inside
// catchUpLocked, under out.mu: the redraw it gets then shows exactly the
// output before the first chunk of its queue.

// maxPending bounds the output read but not yet taken by the feeder (which
// may be writing as much again into the model). Past it the reader waits
// for the feeder: the model must see every byte, so a program that
// outruns it is slowed, not dropped.
const maxPending = 1 << 20

// readBuf is the size of one read batch from the PTY.
const readBuf = 64 << 10

// outQueue is the forwarding side of the output.
type outQueue struct {
	// mu guards the fields that follow.
	mu      sync.Mutex
	room    sync.Cond // signalled when pending shrinks
	clients map[*client]struct{}
	pending [][]byte
	pbytes  int
	// closed: the feeder has ended; what is read now goes to the
	// clients only.
	closed bool
	// ready has a token when pending has something for the feeder.
	ready chan struct{}
}

func (o *outQueue) init() {
	o.room.L = &o.mu
	if o.clients == nil {
		o.clients = map[*client]struct{}{}
	}
	o.ready = make(chan struct{}, 1)
}

// readPTY reads the program's output and hands each batch to the clients
// and the feeder. It never waits for a client; it waits for the feeder
// only past maxPending.
func (h *holder) readPTY() {
	buf := make([]byte, readBuf)
	for {
		n, err := readBatch(h.master, buf)
		if n > 0 {
			// One copy, shared read-only by the feeder and every
			// client's queue.
			h.forward(append([]byte(nil), buf[:n]...))
			// Let the client writers and the feeder take this batch
			// before the next read: on the holder's one P a reader
			// that the program keeps busy would otherwise run for a
			// whole time slice, and a client's queue would fill
			// meanwhile and be dropped to a redraw.
			runtime.Gosched()
		}
		if err != nil {
			return
		}
	}
}

func (h *holder) forward(chunk []byte) {
	o := &h.out
	o.mu.Lock()
	for c := range o.clients {
		c.push(chunk)
	}
	for !o.closed && o.pbytes > 0 && o.pbytes+len(chunk) > maxPending {
		o.room.Wait()
	}
	if !o.closed {
		o.pending = append(o.pending, chunk)
		o.pbytes += len(chunk)
	}
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// feed writes pending output into the screen model until the holder
// quits.
func (h *holder) feed() {
	for {
		select {
		case <-h.out.ready:
		case <-h.quit:
			h.out.mu.Lock()
			h.out.closed = true
			h.out.room.Broadcast()
			h.out.mu.Unlock()
			return
		}
		h.mu.Lock()
		h.catchUpLocked(nil)
		h.mu.Unlock()
	}
}

// catchUpLocked feeds the pending output to the screen model. then, if
// not nil, runs under out.mu at the moment the pending output is taken.
// The caller holds mu.
func (h *holder) catchUpLocked(then func()) {
	o := &h.out
	o.mu.Lock()
	p := o.pending
	o.pending, o.pbytes = nil, 0
	if then != nil {
		then()
	}
	o.room.Broadcast()
	o.mu.Unlock()
	if len(p) == 0 {
		return
	}
	for i, b := range p {
		if i > 0 {
			// The reader and the client writers go on between
			// batches (mu is not theirs).
			runtime.Gosched()
		}
		h.vt.Write(b)
	}
	h.lastOutput = time.Now()
	h.changedLocked()
	if len(h.replies) > 0 {
		select {
		case h.replyReady <- struct{}{}:
		default:
		}
	}
}
