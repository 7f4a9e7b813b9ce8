// Package server serves the daemon's core (internal/daemon) to clients
// over the wire protocol (internal/wire): it listens on the state
// directory's unix socket, bounds what clients can make it hold, learns
// each peer's uid (SO_PEERCRED) and passes it to the core as its
// daemon.Peer, validates each request once, here, and maps the core's
// errors to wire kinds in one place (kindOf). Remote access adds a TLS
// listener whose peers are named by their certificates.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/tlsdir"
	"github.com/corral-dev/corral/internal/unixsock"
	"github.com/corral-dev/corral/internal/wire"
	"github.com/corral-dev/corral/session"
)

// Config describes a daemon and how it is served.
type Config struct {
	daemon.Config
	// SendStall bounds how long one frame of a command's output may wait
	// for its client to read (0 means DefaultSendStall): past it the
	// daemon stops the command (grace, then kill), freeing its session's
	// turn, and logs it.
	SendStall time.Duration
	// Listen, if set (HOST:PORT), also serves remote clients there over
	// TCP with TLS 1.3 and client certificates, with the credentials of
	// TLSDir (made by corral tls init: see internal/tlsdir and remote.go).
	Listen string
	TLSDir string
}

// Server is a daemon served on its unix socket, and on TCP with TLS when
// Config.Listen is set.
type Server struct {
	cfg   Config
	d     *daemon.Daemon
	lis   net.Listener
	sock  string
	stall time.Duration
	// slots bounds the connections held at once, local and remote;
	// callSlots the calls served at once (limits.go).
	slots     chan struct{}
	callSlots chan struct{}
	// stopped is closed when a stop begins: a call waiting for a slot
	// gives up.
	stopped chan struct{}
	remote  *remote // nil without Config.Listen

	// mu guards the fields that follow.
	mu       sync.Mutex
	conns    map[*conn]struct{}
	stopping bool

	calls  sync.WaitGroup // calls under way
	conned sync.WaitGroup // connection goroutines
	accept sync.WaitGroup // the accept loop
	once   sync.Once

	ops  ops  // health, metrics and drain: health.go, drain.go
	jobs jobs // detached commands: jobs.go
}

// conn is one client connection; busy while a call runs on it (guarded by
// Server.mu).
type conn struct {
	nc   net.Conn
	busy bool
	// idle is since when the connection, past its handshake, waits for
	// its next call (zero while it does not).
	idle time.Time
}

// Bounds of a stop.
const (
	// stopBound is how long a stop lets running calls finish before the
	// core lets their sessions go (the commands go on in their shells).
	stopBound = 5 * time.Second
	// flushBound is how long a stopping daemon then lets the last results
	// reach their clients.
	flushBound = 2 * time.Second
)

// Open opens the daemon of cfg.StateDir (its store first: only one daemon
// holds it), listens on its socket, and recovers its sessions. Serve then
// answers clients.
func Open(cfg Config) (*Server, error) {
	if err := unixsock.PeerCheckSupported(); err != nil {
		return nil, err // a daemon does not serve what it cannot check
	}
	if cfg.Log == nil {
		// The server logs refusals itself: a zero Config must not make a
		// malformed call crash the daemon (daemon.Open's default is its
		// own copy's).
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	d, err := daemon.Open(cfg.Config)
	if err != nil {
		return nil, err
	}
	var rem *remote
	if cfg.Listen != "" {
		// Before the socket: a daemon that cannot serve what it was
		// asked to serve does not start.
		if rem, err = listenRemote(cfg.Listen, cfg.TLSDir); err != nil {
			d.Close()
			return nil, err
		}
	}
	sock := wire.SocketPath(cfg.StateDir)
	lis, err := activated(sock) // a socket unit's (activation_unix.go)
	if err == nil && lis != nil {
		cfg.Log.Info("serving the socket the service manager passed (socket activation)", "socket", sock)
	} else if err == nil {
		lis, err = unixsock.Listen(sock)
	}
	if errors.Is(err, unixsock.ErrInUse) {
		err = daemon.Running(cfg.StateDir, err)
	}
	if err != nil {
		if rem != nil {
			rem.lis.Close()
		}
		d.Close()
		return nil, err
	}
	slots := make(chan struct{}, maxConns)
	s := &Server{cfg: cfg, d: d, sock: sock, stall: cfg.SendStall, conns: map[*conn]struct{}{},
		slots: slots, callSlots: make(chan struct{}, maxCalls), stopped: make(chan struct{}), remote: rem}
	s.lis = limitConns(lis, slots, s.shedIdle)
	if s.stall <= 0 {
		s.stall = DefaultSendStall
	}
	s.watchRecovery()
	d.Start()
	return s, nil
}

// Daemon is the core this server serves.
func (s *Server) Daemon() *daemon.Daemon { return s.d }

// Serve answers clients until a client asks the daemon to stop or ctx
// ends, then stops: see shutdown. Sessions keep running after it returns.
func (s *Server) Serve(ctx context.Context) error {
	if s.remote != nil {
		s.cfg.Log.Info("serving remote clients", "listen", s.remote.lis.Addr().String(), "tls", s.cfg.TLSDir,
			"dead_peer_bound", DeadPeerBound)
		s.accept.Add(1)
		go s.acceptRemote(ctx)
	}
	s.accept.Add(1)
	go func() {
		defer s.accept.Done()
		s.acceptEach(ctx, s.lis, "a connection", func(nc net.Conn) {
			s.conned.Add(1)
			go s.serveConn(nc)
		})
	}()
	s.ops.serving.Store(true)
	select {
	case <-ctx.Done():
		s.shutdown(s.drainBound(), s.ops.hurry, true)
	case <-s.d.StopRequested():
		s.shutdown(stopBound, nil, false)
	}
	return nil
}

// acceptEach accepts connections on lis until it is closed (or the
// server stops), handing each to handle. An Accept that fails otherwise
// (out of descriptors or memory, say: this daemon's own shortage, which a
// connection closing or a take-over given up ends) is retried after a
// growing pause, as net/http does; what names the connection in the log.
func (s *Server) acceptEach(ctx context.Context, lis net.Listener, what string, handle func(net.Conn)) {
	var backoff time.Duration
	for {
		nc, err := lis.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.cfg.Log.Warn("cannot accept "+what+"; trying again", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			case <-s.d.StopRequested():
				return
			}
			continue
		}
		backoff = 0
		handle(nc)
	}
}

// shutdown stops serving: it closes idle connections and refuses new
// calls, stops accepting (a drain first tells the connections made
// meanwhile that the daemon stops: drain.go), lets calls under way finish
// within bound (or until hurry is closed), then has the core let
// every session go without stopping its shell (a command still running
// goes on; its caller gets an error) and end its oneshots, lets the last
// results reach their clients within flushBound, closes what is left, and
// closes the core. It kills nothing and purges no record.
func (s *Server) shutdown(bound time.Duration, hurry <-chan struct{}, drain bool) {
	s.once.Do(func() {
		s.mu.Lock()
		s.stopping = true
		close(s.stopped)
		for c := range s.conns {
			if !c.busy {
				c.nc.Close()
			}
		}
		s.mu.Unlock()
		if !drain {
			s.lis.Close() // a stop call: the socket refuses at once
		}
		drained := s.drainCalls(bound, hurry, drain)
		s.lis.Close()
		if s.remote != nil {
			s.remote.lis.Close()
		}
		s.accept.Wait()
		if !drained {
			// Let go first: a call cut off now must not be taken as its
			// command's cancellation.
			s.d.Release()
			waitFor(&s.calls, flushBound)
		}
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		waitFor(&s.conned, flushBound)
		s.d.Close()
	})
}

// waitFor waits for wg up to bound and reports whether it ended.
func waitFor(wg *sync.WaitGroup, bound time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(bound):
		return false
	}
}

// begin marks c busy with a call, unless the server is stopping.
func (s *Server) begin(c *conn) bool {
	// A call slot first: past maxCalls the call waits, its connection
	// held, until one ends or a stop begins.
	select {
	case s.callSlots <- struct{}{}:
	case <-s.stopped:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		<-s.callSlots
		return false
	}
	c.busy = true
	s.calls.Add(1)
	return true
}

// end marks c idle again; a stopping server closes it.
func (s *Server) end(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.busy = false
	s.calls.Done()
	<-s.callSlots
	if s.stopping {
		c.nc.Close()
	}
}

// serveConn serves one local connection: the handshake, then its calls
// in turn.
func (s *Server) serveConn(nc net.Conn) {
	defer s.conned.Done()
	s.register(nc, func(c *conn) { s.serve(c, nc, nil) })
}

// register counts nc among the server's connections while fn serves it
// (so that a stop closes it: an idle one at once, a busy one after its
// call), then closes it. It runs nothing and returns false if the server
// is stopping.
func (s *Server) register(nc net.Conn, fn func(*conn)) bool {
	c := &conn{nc: nc}
	s.mu.Lock()
	stopping := s.stopping
	if !stopping {
		s.conns[c] = struct{}{}
	}
	s.mu.Unlock()
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	if stopping {
		if _, remote := nc.(*net.TCPConn); !remote {
			// (A remote client is still in its TLS handshake here: a
			// plaintext frame would garble it; it sees the close.)
			s.refuseStopping(nc)
		}
		return false
	}
	fn(c)
	return true
}

// serve serves a registered connection: the handshake, then its calls in
// turn: c as registered, nc what it carries (c's own connection, or TLS
// over it). peer is the connection's peer if its transport said who it
// is (TLS), nil for a local one (learned at the handshake).
func (s *Server) serve(c *conn, nc net.Conn, peer *daemon.Peer) {
	wc := wire.NewConn(nc)
	p, ok := s.handshake(wc, peer)
	if !ok {
		return
	}
	next := func() (wire.Header, error) { return wc.ReadHeader() }
	for {
		nc.SetReadDeadline(time.Now().Add(wire.IdleBound))
		s.setIdle(c, true)
		h, err := next()
		s.setIdle(c, false)
		if err != nil {
			return
		}
		nc.SetReadDeadline(time.Time{}) // while the call waits for a slot
		if !s.begin(c) {
			wc.WriteError(&wire.Error{Kind: wire.KindStopping, Message: daemon.ErrStopping.Error()})
			return
		}
		// The rest of the call's frame must follow at once.
		nc.SetReadDeadline(time.Now().Add(wire.HandshakeBound))
		if err := s.stillValid(nc); err != nil {
			s.end(c)
			s.refused(nc.RemoteAddr(), rejectLabel(tlsdir.RefusalReason(err)), string(tlsdir.RefusalReason(err)), err, "identity", p.Name)
			wc.WriteError(&wire.Error{Kind: wire.KindPermission, Message: fmt.Sprintf("%s: %v", p, err)})
			return
		}
		next, ok = s.call(wc, p, h)
		s.end(c)
		if !ok {
			return
		}
	}
}

// setIdle marks c as waiting for its next call, or not.
func (s *Server) setIdle(c *conn, idle bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.idle = time.Time{}
	if idle {
		c.idle = time.Now()
	}
}

// shedIdle closes the connection that has waited longest for its next
// call, to make room for a new one when every slot is taken, and reports
// whether there was one. A Client redials a reused connection the daemon
// closed (nothing of the call was read).
func (s *Server) shedIdle() bool {
	s.mu.Lock()
	var oldest *conn
	for c := range s.conns {
		// Not one whose next call has just come (its client would see
		// the call lost): the least recently busy of the rest.
		if !c.busy && !c.idle.IsZero() && (oldest == nil || c.idle.Before(oldest.idle)) && !pending(c.nc) {
			oldest = c
		}
	}
	if oldest != nil {
		oldest.idle = time.Time{}
	}
	s.mu.Unlock()
	if oldest == nil {
		return false
	}
	s.cfg.Log.Debug("every connection slot taken: closed the connection idle longest", "max", maxConns)
	oldest.nc.Close()
	return true
}

// handshake reads the client's Hello, learns who it is, and answers.
func (s *Server) handshake(c *wire.Conn, known *daemon.Peer) (daemon.Peer, bool) {
	c.Net().SetReadDeadline(time.Now().Add(wire.HandshakeBound))
	c.Net().SetWriteDeadline(time.Now().Add(wire.HandshakeBound))
	defer c.Net().SetWriteDeadline(time.Time{})
	typ, b, err := c.ReadFrame(wire.MaxHello)
	if err != nil {
		if errors.Is(err, wire.ErrFrameTooLarge) {
			c.WriteError(&wire.Error{Kind: wire.KindBadRequest, Message: err.Error()})
		}
		return daemon.Peer{}, false
	}
	if typ != wire.FrameHello {
		c.WriteError(&wire.Error{Kind: wire.KindBadRequest, Message: fmt.Sprintf("the first frame must be a Hello, not %q", typ)})
		return daemon.Peer{}, false
	}
	var h wire.Hello
	if err := wire.Decode(b, &h); err != nil {
		c.WriteError(err.(*wire.Error))
		return daemon.Peer{}, false
	}
	v, werr := wire.Negotiate(h)
	if werr != nil {
		c.WriteError(werr)
		return daemon.Peer{}, false
	}
	var peer daemon.Peer
	if known != nil {
		peer = *known
	} else {
		raw := c.Net()
		if lc, ok := raw.(*limitedConn); ok {
			raw = lc.Conn
		}
		uid, err := unixsock.PeerUID(raw)
		if err != nil {
			c.WriteError(&wire.Error{Kind: wire.KindPermission, Message: "cannot learn who you are: " + err.Error()})
			return daemon.Peer{}, false
		}
		peer = daemon.Peer{UID: uid}
	}
	if err := s.d.Authorize(peer); err != nil {
		s.ops.fleet.reject(rejectOtherUID)
		c.WriteError(wireErr(err))
		return daemon.Peer{}, false
	}
	c.Version = v
	if c.WriteJSON(wire.FrameWelcome, wire.Welcome{Version: v, Pid: os.Getpid()}) != nil {
		return daemon.Peer{}, false
	}
	return peer, true
}

// call serves one call whose header is h. It returns how to read the
// next call's header, and false if the connection is to be closed (out of
// step, or broken).
func (s *Server) call(c *wire.Conn, peer daemon.Peer, h wire.Header) (func() (wire.Header, error), bool) {
	direct := func() (wire.Header, error) { return c.ReadHeader() }
	if h.Type != wire.FrameCall {
		s.answer(c, wire.FrameError, &wire.Error{Kind: wire.KindBadRequest, Message: fmt.Sprintf("a %q frame where a call was expected", h.Type)})
		return nil, false
	}
	b, err := c.ReadPayload(h, wire.MaxControl)
	if err != nil {
		if errors.Is(err, wire.ErrFrameTooLarge) {
			s.answer(c, wire.FrameError, &wire.Error{Kind: wire.KindBadRequest, Message: "a call of " + err.Error()})
		}
		return nil, false
	}
	c.Net().SetReadDeadline(time.Time{})
	if !utf8.Valid(b) {
		// encoding/json would replace each such byte with U+FFFD: the
		// command, its environment or its paths would run changed.
		return direct, s.answer(c, wire.FrameError, &wire.Error{Kind: wire.KindBadRequest,
			Message: fmt.Sprintf("the call is not valid UTF-8 (at byte %d): JSON text is UTF-8, and a byte that is not would be replaced; send a command, environment entry or path that is not UTF-8 in its _bytes field (base64: command_bytes, env_bytes, dir_bytes, cwd_bytes)", invalidAt(b))})
	}
	var call wire.Call
	if err := wire.Decode(b, &call); err != nil {
		return direct, s.answer(c, wire.FrameError, err)
	}
	ctx := context.Background()
	reply := func(v any, err error) (func() (wire.Header, error), bool) {
		if err != nil {
			s.ops.fleet.refusedCall(err)
			return direct, s.answer(c, wire.FrameError, wireErr(err))
		}
		return direct, s.answer(c, wire.FrameReply, v)
	}
	if wire.IsTermCall(call.Call) {
		return s.term(c, peer, &call)
	}
	switch call.Call {
	case wire.CallExec:
		if call.Exec == nil {
			return reply(nil, fmt.Errorf("%w: an exec call without its exec", daemon.ErrBadRequest))
		}
		if werr := call.Exec.DecodeBytes(); werr != nil {
			return direct, s.answer(c, wire.FrameError, werr)
		}
		return s.exec(c, peer, call.Exec)
	case wire.CallList:
		list, err := s.d.List(ctx, peer)
		out := wire.Sessions{Sessions: make([]wire.Session, 0, len(list))}
		for _, si := range list {
			out.Sessions = append(out.Sessions, wire.Session{Name: si.Name, State: si.State, Shell: si.Shell,
				CreatedUnix: si.Created.Unix(), LastUsedUnix: si.LastUsed.Unix(), ShellPid: si.ShellPid, Busy: si.Busy, Reason: si.Reason, BackgroundBytes: si.BackgroundBytes,
				Limits: wire.LimitsOf(si.Limits), Kind: si.Kind, Term: termInfoOf(si.Term)})
			out.Sessions[len(out.Sessions)-1].SetCwd(si.Cwd)
			wire.SetUsage(&out.Sessions[len(out.Sessions)-1], si.Usage)
		}
		return reply(out, err)
	case wire.CallKill:
		k := call.Kill
		if k == nil {
			k = &wire.Kill{}
		}
		if k.All == (len(k.Names) > 0) {
			return reply(nil, fmt.Errorf("%w: name sessions to kill, or all", daemon.ErrBadRequest))
		}
		killed, err := s.d.Kill(ctx, peer, k.Names, k.All)
		return reply(wire.Killed{Killed: nonNil(killed)}, err)
	case wire.CallStatus:
		st, err := s.d.Status(ctx, peer)
		return reply(wire.Status{Pid: st.Pid, Socket: s.sock, StateDir: st.StateDir, Sessions: st.Sessions,
			StartedUnix: st.Started.Unix(), Isolation: string(st.Isolation)}, err)
	case wire.CallStop:
		return reply(struct{}{}, s.d.Stop(ctx, peer))
	case wire.CallResume:
		return s.resume(c, peer, call.Resume)
	}
	return reply(nil, fmt.Errorf("%w: unknown call %q (want exec, resume, list, kill, status or stop)", daemon.ErrBadRequest, call.Call))
}

// answer writes a call's last frame, waiting at most the send-stall bound
// for the client to take it: a client that sends calls and reads none of
// the replies fills its socket, and must not hold its connection (one of
// maxConns) for ever; past the bound the connection is closed. It reports
// whether the frame was written.
//
// A reply over what a frame may carry (a terminal screen asked with more
// scrollback than MaxReply holds) is answered with an error saying so,
// and the connection serves on.
func (s *Server) answer(c *wire.Conn, typ byte, v any) bool {
	nc := c.Net()
	nc.SetWriteDeadline(time.Now().Add(s.stall))
	defer nc.SetWriteDeadline(time.Time{})
	b, err := json.Marshal(v)
	if n := len(b); err == nil && n > maxReply {
		typ = wire.FrameError
		b, _ = json.Marshal(wire.Error{Kind: wire.KindBadRequest, Message: fmt.Sprintf(
			"the answer is %d bytes, more than the %d MiB one answer may carry: ask for less (a terminal screen: fewer scrollback rows, --scrollback N)",
			n, maxReply>>20)})
	}
	if err == nil {
		err = c.WriteFrame(typ, b)
	}
	if err != nil && timedOut(err) {
		s.cfg.Log.Warn("client read none of its replies; connection closed", "bound", s.stall)
	}
	return err == nil
}

// maxReply is the largest answer sent (wire.MaxReply; tests lower it).
var maxReply = wire.MaxReply

// invalidAt is the offset of the first byte of b that is not UTF-8.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// kindOf is the wire kind of an error of the core (or of this server):
// the one place they are mapped.
func kindOf(err error) wire.Kind {
	switch {
	case errors.Is(err, daemon.ErrBadRequest):
		return wire.KindBadRequest
	case errors.Is(err, daemon.ErrNotFound):
		return wire.KindNotFound
	case errors.Is(err, daemon.ErrStopping):
		return wire.KindStopping
	case errors.Is(err, daemon.ErrBroken):
		return wire.KindBroken
	case errors.Is(err, daemon.ErrRecovering):
		return wire.KindRecovering
	case errors.Is(err, daemon.ErrPermission):
		return wire.KindPermission
	case errors.Is(err, session.ErrClosed):
		return wire.KindSessionClosed
	case errors.Is(err, errClientNotReading):
		return wire.KindNotReading
	}
	return wire.KindInternal
}

func wireErr(err error) *wire.Error { return &wire.Error{Kind: kindOf(err), Message: err.Error()} }

// timedOut reports whether err is a deadline passing.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are sent
	}
	return b
}
