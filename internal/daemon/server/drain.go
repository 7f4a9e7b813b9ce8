package server

import (
	"log/slog"
	"net"
	"time"

	"github.com/corral-dev/corral/internal/wire"
)

// How a daemon stops on a signal (the context of Serve ending: SIGTERM
// from systemd, Kubernetes or Nomad): it drains. (A client's stop call
// closes the socket at once instead, and waits stopBound: its caller is
// at the machine and wants it gone.) It takes no new call from then on: a
// connection made while it drains is answered with a KindStopping error ("the daemon is
// stopping"), not refused by the kernel, so a client knows to come back
// rather than start a daemon of its own; /readyz says draining. The calls
// under way finish, up to the drain bound (SetDrain) or until hurry is
// closed (a second signal). What is still running then goes on in its
// session's shell, which outlives the daemon as always; its caller gets
// an error, and oneshots (which no later daemon can take over) are
// stopped. The whole stop takes at most the drain bound + flushBound (the
// last results) + a few seconds of the core's own bounds.

// DefaultDrain is the drain bound of a daemon for which SetDrain was not
// called: that of a client's stop.
const DefaultDrain = stopBound

// SetDrain sets how long a stop on Serve's context waits for the calls
// under way (bound; 0 means DefaultDrain), and a channel whose closing
// stops that wait at once (nil for none). Call it before Serve.
func (s *Server) SetDrain(bound time.Duration, hurry <-chan struct{}) {
	s.ops.drain, s.ops.hurry = bound, hurry
}

func (s *Server) drainBound() time.Duration {
	if s.ops.drain > 0 {
		return s.ops.drain
	}
	return DefaultDrain
}

// drainCalls waits for the calls under way, up to bound or until hurry is
// closed, and logs how the wait ended (and whether a signal began it). It reports whether every call
// ended.
func (s *Server) drainCalls(bound time.Duration, hurry <-chan struct{}, signalled bool) bool {
	why := "stop call"
	if signalled {
		why = "signal"
	}
	s.mu.Lock()
	n := 0
	for c := range s.conns {
		if c.busy {
			n++
		}
	}
	s.mu.Unlock()
	n += s.jobs.running() // detached commands whose client went away
	log := s.opsLog().With("why", why)
	if n == 0 {
		log.Info("daemon stopping; no call under way")
		return true // none can begin: stopping is set
	}
	log.Info("daemon stopping: draining the calls under way; new calls are refused", "calls", n, "bound", bound.String())
	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	start := time.Now()
	select {
	case <-done:
		log.Info("drained: every call under way ended", "took", time.Since(start).Round(time.Millisecond).String())
		return true
	case <-time.After(bound):
		log.Warn("drain bound passed: the commands still running go on in their sessions (their callers get an error), oneshots are stopped", "bound", bound.String())
	case <-hurry:
		log.Warn("drain cut short (a second signal): the commands still running go on in their sessions (their callers get an error), oneshots are stopped", "after", time.Since(start).Round(time.Millisecond).String())
	}
	return false
}

// refuseStopping answers a connection made while the daemon stops: it
// reads the Hello (within wire.HandshakeBound) and answers with a
// KindStopping error, so the client says why rather than "connection
// reset".
func (s *Server) refuseStopping(nc net.Conn) {
	s.ops.refusedStopping.Add(1)
	s.ops.fleet.reject(rejectStopping)
	nc.SetDeadline(time.Now().Add(wire.HandshakeBound))
	wc := wire.NewConn(nc)
	if typ, _, err := wc.ReadFrame(wire.MaxHello); err != nil || typ != wire.FrameHello {
		return
	}
	wc.WriteError(&wire.Error{Kind: wire.KindStopping, Message: "the daemon is stopping: it lets the commands under way finish and takes no new call " +
		"(sessions keep running; try again once the next daemon serves)"})
}

// opsLog is the server's logger (a Config may leave it nil).
func (s *Server) opsLog() *slog.Logger {
	if s.cfg.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.cfg.Log
}
