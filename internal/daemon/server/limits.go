package server

import (
	"net"
	"sync"
)

// The server's bounds on what clients can make it hold. Every client of
// the socket has the daemon's uid (others are refused at the handshake),
// but a buggy or hostile one must not be able to grow the daemon without
// bound. With them, what the server holds for clients is at most
//
//	maxConns × (64 KiB read buffer + one control frame of wire.MaxControl + stdinQueue × wire.MaxStdin)
//
// that is 64 × (64 KiB + 4 MiB + 1 MiB) ≈ 330 MiB if every connection
// sent a maximal call at once, and a few KiB for anything a normal client
// does. A frame's payload is read only after its header says how long it
// is, so no frame larger than its bound is ever buffered; a connection
// must send its Hello within wire.HandshakeBound and may stay
// wire.IdleBound between calls. One call runs at a time per connection.
const (
	// maxConns bounds the connections served at once; past it the one
	// idle longest is closed, or new ones wait in the listen backlog until
	// one closes. Each CLI call is one.
	maxConns = 64
)

// connLimit is a listener that serves at most cap(slots) connections at
// once (slots are shared with the remote listener, which takes one only
// once a client is authenticated). When all are taken, the next
// connection is accepted and shed is called: it closes the connection that
// has waited longest for a call (one past its handshake, between calls),
// freeing its slot. With none to close, Accept waits for a slot to free
// (the accepted connection waits with it; further ones wait in the
// kernel's backlog). So idle connections, a hostile client's or the few a
// Client keeps for reuse, never keep a new client out.
type connLimit struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	close  func() error
	shed   func() bool
}

// limitConns limits l to the free slots of slots, shedding the idlest
// connection (shed) when all are taken.
func limitConns(l net.Listener, slots chan struct{}, shed func() bool) net.Listener {
	c := &connLimit{Listener: l, slots: slots, closed: make(chan struct{}), shed: shed}
	c.close = sync.OnceValue(func() error { close(c.closed); return l.Close() })
	return c
}

func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
	default:
		if l.shed != nil {
			l.shed()
		}
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			c.Close()
			return nil, net.ErrClosed
		}
	}
	return &limitedConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

// Close closes the listener, ending an Accept that waits for a slot.
func (l *connLimit) Close() error { return l.close() }

// limitedConn gives its slot back when closed (once, however often).
type limitedConn struct {
	net.Conn
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
