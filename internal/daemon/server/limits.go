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
//	maxCalls × (64 KiB read buffer + one control frame of wire.MaxControl + stdinQueue × wire.MaxStdin)
//	+ maxConns × an idle connection (about 11 KiB on the unix socket, 55 KiB with TLS)
//
// that is 64 × (64 KiB + 4 MiB + 1 MiB) ≈ 330 MiB if every call were
// maximal at once, plus 11-55 MiB for 1024 idle connections, and a few KiB
// for anything a normal client does. A frame's payload is read only after
// its header says how long it is, and a call's only once it holds one of
// the maxCalls slots, so no frame larger than its bound is ever buffered
// and idle or waiting connections hold no buffer; a connection must send
// its Hello within wire.HandshakeBound and may stay wire.IdleBound between
// calls. One call runs at a time per connection.
const (
	// maxConns bounds the connections held at once, local and remote,
	// idle or not; past it the one idle longest is closed, or new ones
	// wait in the listen backlog until one closes. Each CLI call is one;
	// a controller or an editor may keep one open per machine or window.
	maxConns = 1024
	// maxCalls bounds the calls served at once; a call past it waits
	// (its connection held) until one ends.
	maxCalls = 64
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
