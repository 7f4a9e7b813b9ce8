package daemon

import (
	"net"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The daemon's bounds on what clients can make it hold. Every client of
// the socket has the daemon's uid (others are refused at accept), but a
// buggy or hostile one must not be able to grow the daemon without bound.
// With them, what the transport holds for clients is at most
//
//	maxConns × (maxStreamsPerConn × (maxMessage + streamWindow) + connWindow + 2×32 KiB buffers + maxHeaderList)
//
// that is 64 × (4 × (4 MiB + 64 KiB) + 1 MiB + 64 KiB + 64 KiB) ≈ 1.1 GiB if
// every stream of every connection sends a maximal message at once, and a
// few MiB for anything a normal client does. On top of the transport, an
// Exec stream queues at most stdinQueue stdin messages of maxStdinChunk
// each (1 MiB; exec.go): 64 × 4 × 1 MiB = 256 MiB more at worst, 1.4 GiB
// in all. (Before stdin messages were capped, 16 queued 4 MiB messages a
// stream took 32 streams to 1.7 GB.) Header blocks, the cause of
// the unbounded growth this replaces (16 MiB each by default), are capped
// at maxHeaderList.
const (
	// maxConns bounds the connections served at once; further ones wait
	// in the listen backlog until one closes. Each CLI call is one.
	maxConns = 64
	// maxStreamsPerConn bounds the calls at once on one connection; a Go
	// client queues more until one ends.
	maxStreamsPerConn = 4
	// maxHeaderList bounds a call's header block (its metadata); corral's
	// own clients send a few hundred bytes.
	maxHeaderList = 64 << 10
	// maxMessage bounds one message each way: an ExecStart carries the
	// client's environment (at most ARG_MAX, 2 MiB with the usual 8 MiB
	// stack) and a command of at most MaxCommand.
	maxMessage = 4 << 20
	// streamWindow and connWindow fix HTTP/2 flow control (otherwise it
	// grows each window up to 16 MiB on a fast link).
	streamWindow = 64 << 10
	connWindow   = 1 << 20
	// handshakeBound is how long a connection may take to send its
	// HTTP/2 preface and settings; idleBound how long one may stay
	// without a call.
	handshakeBound = 5 * time.Second
	idleBound      = 5 * time.Minute
	// softMemory is the daemon's soft memory limit: past it the Go
	// runtime collects harder and returns freed memory to the system, so
	// that a burst does not leave the daemon large for good.
	softMemory = 256 << 20
)

// serverOptions are the gRPC server's bounds (see above).
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.MaxHeaderListSize(maxHeaderList),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxSendMsgSize(maxMessage),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.ConnectionTimeout(handshakeBound),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleBound, Time: 2 * time.Minute, Timeout: 20 * time.Second}),
		// Pings more often than this end the connection (a ping flood
		// costs a reply each).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// boundMemory sets the soft memory limit unless one was given
// ($GOMEMLIMIT).
func boundMemory() {
	if debug.SetMemoryLimit(-1) == 1<<63-1 { // none set
		debug.SetMemoryLimit(softMemory)
	}
}

// connLimit is a listener that serves at most n connections at once:
// Accept waits while n are open, leaving new ones in the kernel's backlog.
type connLimit struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	close  func() error
}

func limitConns(l net.Listener, n int) net.Listener {
	c := &connLimit{Listener: l, slots: make(chan struct{}, n), closed: make(chan struct{})}
	c.close = sync.OnceValue(func() error { close(c.closed); return l.Close() })
	return c
}

func (l *connLimit) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
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
