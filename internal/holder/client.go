package holder

import "sync"

// client is one attached connection's output side.
type client struct {
	// mu guards the fields that follow.
	mu     sync.Mutex
	cond   sync.Cond
	q      [][]byte
	qBytes int
	// behind is set when output was dropped: the writer sends a resync
	// and a redraw next.
	behind  bool
	detach  bool
	ended   bool
	gone    bool
	status  Status
	resyncs int
}

func newClient() *client {
	c := &client{}
	c.cond.L = &c.mu
	return c
}

// push queues chunk, or drops the queue when it would pass its bound.
func (c *client) push(chunk []byte) {
	c.mu.Lock()
	if !c.behind && !c.gone {
		if c.qBytes+len(chunk) > ClientQueueBytes {
			c.behind, c.q, c.qBytes = true, nil, 0
		} else {
			c.q = append(c.q, chunk)
			c.qBytes += len(chunk)
		}
	}
	c.cond.Signal()
	c.mu.Unlock()
}

// end tells the client that the program has ended, after what is queued.
func (c *client) end(st Status) {
	c.mu.Lock()
	c.ended, c.status = true, st
	c.cond.Signal()
	c.mu.Unlock()
}

func (c *client) set(f *bool) {
	c.mu.Lock()
	*f = true
	c.cond.Signal()
	c.mu.Unlock()
}
