package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/tlsdir"
	"github.com/corral-dev/corral/internal/wire"
)

// Remote access: the same protocol over TCP with TLS 1.3 and mutual
// authentication (tlsdir.ServerConfig: a client certificate signed by the
// CA of the credentials directory, checked against its revocation list,
// which is reread when it changes). The peer of such a connection is the
// identity its certificate names (daemon.Peer.Name, ReadOnly), never a uid.
//
// What a connection can hold before it is authenticated is bounded. A
// connection must be authenticated within wire.HandshakeBound of its
// handshake's start, or it is dropped (and logged). At most
// handshakesPerHost connections of one address are in their TLS handshake
// at once; more wait their turn, for at most that bound too (a burst of a
// controller's connections is served 16 at a time, about 1.5 ms each). At most
// maxPendingPerHost connections of one address, and maxPending in all,
// are waiting or in their handshake: a further one is refused at once,
// and logged. Only an authenticated client takes one of the daemon's
// maxConns serving slots. So a slowloris (connections that open and send
// nothing, or a byte at a time) holds no serving slot, no handshake slot
// for longer than the bound, and from one address cannot keep other
// addresses' clients out.

// Keepalive and the bound on noticing a dead peer. A peer that vanished
// (a cable cut, a machine gone: no FIN, no RST) is noticed within
// DeadPeerBound, whatever the connection was doing: an idle one (a
// command running without output, the daemon waiting to read) by
// keepalive probes, keepAliveIdle of silence then keepAliveCount probes
// keepAliveInterval apart (3 + 3×2 = 9 s); one with data unacknowledged
// (output sent to a peer that is gone) by TCP_USER_TIMEOUT (userTimeout)
// on Linux, which also caps the keepalive probes. The second left of the
// bound is for stopping the command (its grace, if it ignores SIGTERM,
// comes on top). The connection
// then fails, and the command of a call on it is stopped as when a
// client closes its connection.
const (
	keepAliveIdle     = 3 * time.Second
	keepAliveInterval = 2 * time.Second
	keepAliveCount    = 3
	// DeadPeerBound is how long a remote peer that vanished may go
	// unnoticed.
	DeadPeerBound = 10 * time.Second
	userTimeout   = 9 * time.Second
)

// The bounds on connections not yet authenticated (see above); each
// holds a descriptor and a few KiB.
const (
	handshakesPerHost = 16
	maxPendingPerHost = 256
	maxPending        = 1024
)

// keepAlive is the keepalive of remote connections, both ends.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount}

// KeepAlive returns the keepalive settings remote connections use (a
// client sets the same on its end).
func KeepAlive() net.KeepAliveConfig { return keepAlive }

// remote is the daemon's TCP listener and its TLS configuration.
type remote struct {
	lis  net.Listener
	conf *tls.Config

	// mu guards the fields that follow: the connections not yet
	// authenticated, in all and by remote address.
	mu      sync.Mutex
	pending int
	hosts   map[string]*hostHandshakes
}

// hostHandshakes are the connections of one remote address not yet
// authenticated: turns holds a token for each in its handshake.
type hostHandshakes struct {
	host    string
	turns   chan struct{}
	pending int // guarded by remote.mu
}

// startHandshake counts a connection from addr as pending, or says why it
// cannot be.
func (r *remote) startHandshake(addr net.Addr) (*hostHandshakes, string) {
	host := addr.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hosts[host]
	switch {
	case r.pending >= maxPending:
		return nil, fmt.Sprintf("%d connections are waiting for their TLS handshake already", maxPending)
	case h != nil && h.pending >= maxPendingPerHost:
		return nil, fmt.Sprintf("%d connections from %s are waiting for their TLS handshake already", maxPendingPerHost, host)
	case h == nil:
		h = &hostHandshakes{host: host, turns: make(chan struct{}, handshakesPerHost)}
		r.hosts[host] = h
	}
	r.pending++
	h.pending++
	return h, ""
}

// endHandshake ends what startHandshake counted.
func (r *remote) endHandshake(h *hostHandshakes) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending--
	if h.pending--; h.pending == 0 {
		delete(r.hosts, h.host)
	}
}

// listenRemote listens on addr (HOST:PORT) with the credentials of dir.
func listenRemote(addr, dir string) (*remote, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: listening on %s needs TLS credentials: give --tls DIR (a directory made by corral tls init)", daemon.ErrBadRequest, addr)
	}
	conf, err := tlsdir.ServerConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("TLS credentials in %s: %w", dir, err)
	}
	lc := net.ListenConfig{KeepAliveConfig: keepAlive}
	lis, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &remote{lis: lis, conf: conf, hosts: map[string]*hostHandshakes{}}, nil
}

// Addr is the address the daemon listens on for remote clients (nil
// without --listen).
func (s *Server) Addr() net.Addr {
	if s.remote == nil {
		return nil
	}
	return s.remote.lis.Addr()
}

// acceptRemote accepts remote connections until the listener is closed.
func (s *Server) acceptRemote(ctx context.Context) {
	defer s.accept.Done()
	r := s.remote
	s.acceptEach(ctx, r.lis, "a remote connection", func(nc net.Conn) {
		hs, refusal := r.startHandshake(nc.RemoteAddr())
		if refusal != "" {
			s.refused(nc.RemoteAddr(), rejectTooMany, refusal, nil)
			nc.Close()
			return
		}
		if err := setUserTimeout(nc, userTimeout); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			s.cfg.Log.Warn("cannot bound the time to notice a dead peer (TCP_USER_TIMEOUT); keepalive alone applies", "remote", nc.RemoteAddr().String(), "err", err)
		}
		s.conned.Add(1)
		go s.serveRemote(nc, hs)
	})
}

// stillValid checks a TLS connection's client certificate again before a
// call (revocation, validity: the checks of its handshake, with the
// revocation list as it is now), so that a certificate revoked or expired
// since the connection was made serves no further call. A local
// connection is always valid.
func (s *Server) stillValid(nc net.Conn) error {
	tc, ok := nc.(*tls.Conn)
	if !ok || s.remote == nil {
		return nil
	}
	st := tc.ConnectionState()
	if len(st.PeerCertificates) > 0 && time.Now().After(st.PeerCertificates[0].NotAfter) {
		return &tlsdir.Refusal{Reason: tlsdir.ReasonExpired, Name: st.PeerCertificates[0].Subject.CommonName,
			Serial: st.PeerCertificates[0].SerialNumber}
	}
	return s.remote.conf.VerifyConnection(st)
}

// refused logs a remote connection refused before it could make a call,
// and counts it under label (fleetmetrics.go).
func (s *Server) refused(addr net.Addr, label, reason string, err error, attrs ...any) {
	s.ops.fleet.reject(label)
	args := append([]any{"remote", addr.String(), "reason", reason}, attrs...)
	if err != nil {
		args = append(args, "err", err)
	}
	s.cfg.Log.Warn("remote connection refused", args...)
}

// serveRemote authenticates a remote connection (the TLS handshake,
// bounded by wire.HandshakeBound), takes a serving slot for it, and serves
// it as serveConn serves a local one.
func (s *Server) serveRemote(nc net.Conn, hs *hostHandshakes) {
	defer s.conned.Done()
	addr := nc.RemoteAddr()
	tc := tls.Server(nc, s.remote.conf)
	ok := s.register(nc, func(c *conn) {
		// Its turn within the bound, then the bound for its handshake.
		var err error
		timedOut := false
		select {
		case hs.turns <- struct{}{}:
			ctx, cancel := context.WithTimeout(context.Background(), wire.HandshakeBound)
			// On a goroutine of its own, which ends with it: the
			// handshake's deep stack (tens of KiB) is not kept by the
			// connection's goroutine while it waits, idle, for calls
			// (about 10 KiB less per idle connection, measured by
			// cmd/corral's TestIdleConnectionMemory).
			shaken := make(chan error, 1)
			go func() { shaken <- tc.HandshakeContext(ctx) }()
			err = <-shaken
			timedOut = ctx.Err() != nil
			cancel()
			<-hs.turns
		case <-time.After(wire.HandshakeBound):
			err = fmt.Errorf("%d connections from %s were in their TLS handshake for %v", handshakesPerHost, hs.host, wire.HandshakeBound)
			timedOut = true
		}
		s.remote.endHandshake(hs)
		if err != nil {
			s.refusedHandshake(addr, err, timedOut)
			return
		}
		id, err := tlsdir.PeerIdentity(tc.ConnectionState())
		if err != nil {
			s.refused(addr, rejectLabel(tlsdir.ReasonBadCert), string(tlsdir.ReasonBadCert), err)
			return
		}
		peer := daemon.Peer{Name: id.Name, ReadOnly: id.ReadOnly, Addr: addr.String()}
		// A serving slot, as a local connection gets one from its
		// listener; an authenticated client waits for one as long as a
		// Hello may take.
		select {
		case s.slots <- struct{}{}:
		case <-time.After(wire.HandshakeBound):
			s.refused(addr, rejectTooMany, fmt.Sprintf("the daemon serves %d connections already", maxConns), nil, "identity", id.Name)
			wire.NewConn(tc).WriteError(&wire.Error{Kind: wire.KindBusy,
				Message: fmt.Sprintf("the daemon serves its limit of %d connections; try again", maxConns)})
			return
		}
		defer func() { <-s.slots }()
		s.cfg.Log.Info("remote client connected", "identity", id.Name, "read_only", id.ReadOnly, "remote", addr.String())
		s.serve(c, tc, &peer)
		s.cfg.Log.Info("remote client disconnected", "identity", id.Name, "remote", addr.String())
	})
	if !ok {
		s.remote.endHandshake(hs)
	}
}

// refusedHandshake logs a failed TLS handshake with its reason; a client
// that spoke corral's own protocol in plaintext is told, in it, what to
// do.
func (s *Server) refusedHandshake(addr net.Addr, err error, timedOut bool) {
	reason := string(tlsdir.RefusalReason(err))
	label := rejectLabel(tlsdir.RefusalReason(err))
	if timedOut {
		reason = fmt.Sprintf("TLS handshake not done within %v", wire.HandshakeBound)
		label = rejectHandshakeTimeout
	}
	var attrs []any
	if name, serial, ok := tlsdir.RefusedName(err); ok {
		attrs = append(attrs, "identity", name, "serial", fmt.Sprintf("%x", serial))
	}
	s.refused(addr, label, reason, err, attrs...)
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) && rh.Conn != nil && rh.RecordHeader[0] == wire.FrameHello {
		rh.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		wire.NewConn(rh.Conn).WriteError(&wire.Error{Kind: wire.KindPermission,
			Message: "this daemon's TCP port speaks TLS with client certificates only: connect with --tls DIR (a directory from corral tls init or tls issue)"})
	}
}
