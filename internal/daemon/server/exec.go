package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/wire"
	"github.com/corral-dev/corral/session"
)

// DefaultSendStall is how long the daemon waits for a client to take one
// frame of its command's output (the socket's buffers full) before it
// stops the command. A live client never comes near it: a reader
// descheduled, paging or swapping takes milliseconds to seconds. Yet it is
// well under the patience of the clients queued behind on the same
// session: an agent tool call is commonly cut at 60 s, a person waits
// less.
const DefaultSendStall = 30 * time.Second

// Why a command of an exec call was stopped, as the context's cause.
var (
	errClientCancelled  = errors.New("cancelled by the client")
	errClientKilled     = errors.New("killed at the client's request")
	errClientGone       = errors.New("the client went away")
	errClientNotReading = errors.New("the client read none of the command's output")
	errBadStream        = errors.New("the client broke the exec protocol")
)

// stdinQueue bounds the stdin frames received but not yet taken by the
// command: past it the daemon stops reading the connection (the client's
// sends block), so a cancel or kill sent behind undelivered stdin waits
// until the command reads or ends (a client that goes away meanwhile is
// noticed: see queueStdin). With frames of at most wire.MaxStdin
// (64 KiB), a call queues at most 1 MiB.
const stdinQueue = 16

// execCall is one exec call after its Exec was read and checked: the
// receiver of the client's frames, the sender of output and result, and
// what the client asked for or did wrong.
type execCall struct {
	c        *wire.Conn
	stall    time.Duration
	cancel   func(error)   // cancels the command's context
	escalate chan struct{} // closed by a kill frame
	escOnce  sync.Once
	done     chan struct{} // closed when the command has returned
	stdin    chan []byte   // to the stdin writer; nil without stdin; closed by the receiver
	next     chan next     // the receiver's last read: the next call's header
	// onKill and onGone, if set (a detached job's reader: jobs.go),
	// replace what a kill frame and the client's going away do: the
	// job's kill, and the end of this reader alone (the command goes on).
	onKill, onGone func()

	// sendMu orders sends (one frame in flight) and guards the fields
	// that follow. rest is what a stall cut off of the frame in flight.
	sendMu  sync.Mutex
	stalled bool
	rest    []byte

	mu     sync.Mutex
	bad    string    // the first protocol violation
	goneAt time.Time // when the connection was found closed or broken
}

type next struct {
	h   wire.Header
	err error
}

// request is the core's request for the wire's Exec, checked once here.
func request(e *wire.Exec) (daemon.ExecRequest, error) {
	// Milliseconds past maxMs wrap when made a time.Duration: into a
	// "negative timeout", or into one of microseconds (18446744073710 ms
	// became 448 µs); a signal past the system's last is none.
	for what, ms := range map[string]int64{"timeout": e.TimeoutMs, "grace": e.GraceMs} {
		if ms > maxMs {
			return daemon.ExecRequest{}, fmt.Errorf("%w: a %s of %d ms (at most %d, about 292 years)", daemon.ErrBadRequest, what, ms, maxMs)
		}
	}
	if e.GraceMs < -maxMs {
		return daemon.ExecRequest{}, fmt.Errorf("%w: a grace of %d ms (a negative one means SIGKILL at once: use -1)", daemon.ErrBadRequest, e.GraceMs)
	}
	if e.StopSignal != 0 && !validSignal(e.StopSignal) {
		return daemon.ExecRequest{}, fmt.Errorf("%w: stop signal %d is not a signal (want 1 to %d)", daemon.ErrBadRequest, e.StopSignal, maxSignal)
	}
	if e.Umask != nil && *e.Umask > 0o777 {
		return daemon.ExecRequest{}, fmt.Errorf("%w: umask %#o is not a umask (want 0 to 0777)", daemon.ErrBadRequest, *e.Umask)
	}
	r := daemon.ExecRequest{Session: e.Session, Command: e.Command, Oneshot: e.Oneshot, Dir: e.Dir, Env: e.Env, Cwd: e.Cwd, Umask: e.Umask, BackgroundOutput: e.BackgroundOutput,
		Options: session.Options{
			Timeout:   time.Duration(e.TimeoutMs) * time.Millisecond,
			MaxOutput: e.MaxOutput,
			// The client's --grace and --signal, for this command only.
			Grace: time.Duration(e.GraceMs) * time.Millisecond,
		},
		Limits: corral.Limits{MemoryMax: e.MemoryMax, MemoryHigh: e.MemoryHigh, CPUs: e.CPUs, PidsMax: e.PidsMax}}
	if e.StopSignal > 0 {
		r.Options.StopSignal = syscall.Signal(e.StopSignal)
	}
	if e.TimeoutMs < 0 {
		r.Options.Timeout = -1 // refused by CheckExec
	}
	return r, daemon.CheckExec(&r)
}

// maxMs is the longest time.Duration in milliseconds.
const maxMs = int64(1<<63-1) / int64(time.Millisecond)

// maxSignal is the last signal number Linux has (SIGRTMAX).
const maxSignal = 64

func validSignal(n int) bool { return n >= 1 && n <= maxSignal }

// exec runs one exec call: it receives the client's stdin, cancel and
// kill frames, sends the command's output as it comes, and the result
// last (after the core recorded the session's state).
func (s *Server) exec(c *wire.Conn, peer daemon.Peer, e *wire.Exec) (func() (wire.Header, error), bool) {
	direct := func() (wire.Header, error) { return c.ReadHeader() }
	req, err := request(e)
	if err != nil {
		return direct, s.answer(c, wire.FrameError, wireErr(err))
	}
	if e.Detach {
		return s.execDetached(c, peer, e, req)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var clock stopClock
	x := &execCall{c: c, stall: s.stall, cancel: clock.wrap(cancel), escalate: make(chan struct{}), done: make(chan struct{}),
		next: make(chan next, 1)}
	out := &chunkWriter{func(b []byte) error { return x.send(wire.FrameStdout, b) }}
	req.Options.Stdout, req.Options.Stderr = out, out // one writer: merged, in order
	if !e.Merge {
		req.Options.Stderr = &chunkWriter{func(b []byte) error { return x.send(wire.FrameStderr, b) }}
	}
	req.Options.Escalate = x.escalate
	var stdin *io.PipeReader
	if e.Stdin {
		pr, pw := io.Pipe()
		req.Options.Stdin, stdin = pr, pr
		x.stdin = make(chan []byte, stdinQueue)
		go writeStdin(pw, x.stdin)
	}
	go x.receive()

	res, err := s.d.Exec(ctx, peer, req)
	s.count(e.Oneshot, res, err)
	s.ops.fleet.stopped(res, req.Options.Timeout, &clock)
	close(x.done)
	if stdin != nil {
		stdin.CloseWithError(io.ErrClosedPipe) // the writer drops what is left
	}
	what := e.Session
	if e.Oneshot {
		what = "oneshot"
	}
	if at := x.wentAway(); !at.IsZero() && errors.Is(context.Cause(ctx), errClientGone) && res != nil {
		// Settled means gone: the tree is, now.
		s.cfg.Log.Info("client went away; its command was stopped", "session", what, "peer", peer.String(),
			"remote", peer.Addr, "outcome", res.Outcome, "stopped_in", time.Since(at))
	}
	if bad := x.violation(); bad != "" {
		fate := "the command did not run"
		if res != nil {
			switch res.Outcome {
			case corral.OutcomeCancelled:
				fate = "the command was stopped"
			case corral.OutcomeStartFailed:
			default:
				fate = fmt.Sprintf("the command had ended (%s, exit %d)", res.Outcome, res.ExitCode)
			}
			if res.StateNotSaved != nil {
				fate += "; the session's state was not saved: " + res.StateNotSaved.Error()
			}
		}
		s.cfg.Log.Warn("malformed exec call refused", "session", what, "err", bad, "fate", fate)
		x.finish(&wire.Error{Kind: wire.KindBadRequest, Message: bad + "; " + fate})
		return nil, false // the stream is out of step: close it
	}
	if x.isStalled() {
		s.cfg.Log.Warn("client read none of its command's output; command stopped", "session", what, "bound", s.stall)
		x.finish(&wire.Error{Kind: wire.KindNotReading, Message: fmt.Sprintf("%v for %v: the daemon stopped the command", errClientNotReading, s.stall)})
		return nil, false
	}
	if err != nil {
		if x.send(wire.FrameError, mustJSON(wireErr(err))) != nil {
			return nil, false
		}
		return x.following, true
	}
	if err := x.send(wire.FrameReply, mustJSON(wireResult(res))); err != nil {
		if errors.Is(err, errClientNotReading) {
			s.cfg.Log.Warn("client read none of its command's output; result not sent", "session", what, "bound", s.stall)
			x.finish(&wire.Error{Kind: wire.KindNotReading, Message: fmt.Sprintf("%v for %v: the result could not be sent", errClientNotReading, s.stall)})
		}
		return nil, false
	}
	return x.following, true
}

// wireResult is the wire form of a command's result.
func wireResult(res *daemon.ExecResult) *wire.Result {
	w := wire.FromResult(res.Result)
	w.SetCwd(res.Cwd)
	w.Limits, w.LimitsChanged = wire.LimitsOf(res.Limits), res.LimitsChanged
	if res.StateNotSaved != nil {
		w.StateNotSaved = res.StateNotSaved.Error()
	}
	return w
}

// following returns the next call's header, as the receiver read it.
func (x *execCall) following() (wire.Header, error) {
	n := <-x.next
	return n.h, n.err
}

// finish sends the last frame of a call that ends the connection: first
// what a stall cut off, then e, each bounded by the stall bound.
func (x *execCall) finish(e *wire.Error) {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	nc := x.c.Net()
	nc.SetWriteDeadline(time.Now().Add(x.stall))
	defer nc.SetWriteDeadline(time.Time{})
	if len(x.rest) > 0 {
		if x.c.WriteRest(x.rest) != nil {
			return
		}
		x.rest = nil
	}
	x.c.WriteError(e)
}

// send sends one frame, waiting at most the stall bound for the client to
// take it. Past the bound the command is stopped and every later send
// fails at once (the command's output from then on is dropped).
func (x *execCall) send(typ byte, b []byte) error {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	if x.stalled {
		return errClientNotReading
	}
	nc := x.c.Net()
	nc.SetWriteDeadline(time.Now().Add(x.stall))
	frame, n, err := x.c.Write(typ, b)
	nc.SetWriteDeadline(time.Time{})
	if err != nil && timedOut(err) {
		x.stalled, x.rest = true, frame[n:]
		x.cancel(errClientNotReading)
		return errClientNotReading
	}
	return err
}

func (x *execCall) isStalled() bool {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	return x.stalled
}

// receive reads the client's frames until the call ends (then it reads
// the next call's header and hands it on) or the client breaks the
// protocol or goes away. A violation stops the command (as a cancel:
// grace, then kill) and ends the reading; the call then fails with
// bad_request. The connection closing cancels the command.
func (x *execCall) receive() {
	stdinOpen := x.stdin != nil
	defer func() {
		if stdinOpen {
			close(x.stdin) // a client that stopped sending has no more stdin
		}
	}()
	ended := func() bool {
		select {
		case <-x.done:
			return true
		default:
			return false
		}
	}
	for {
		h, err := x.c.ReadHeader()
		if err != nil {
			x.gone()
			x.next <- next{err: err}
			return
		}
		if h.Type == wire.FrameCall && ended() {
			x.next <- next{h: h} // the client's next call
			return
		}
		limit := wire.MaxControl
		if h.Type == wire.FrameStdin {
			limit = wire.MaxStdin
		}
		b, err := x.c.ReadPayload(h, limit)
		if errors.Is(err, wire.ErrFrameTooLarge) {
			if h.Type == wire.FrameStdin {
				x.violate(fmt.Sprintf("a stdin frame of %d bytes (at most %d KiB each)", h.Len, wire.MaxStdin>>10))
			} else {
				x.violate(err.Error()) // names the frame's type and its bound
			}
			x.next <- next{err: err}
			return
		}
		if err != nil {
			x.gone()
			x.next <- next{err: err}
			return
		}
		if ended() && h.Type != wire.FrameCall {
			continue // stdin, cancel or kill that crossed the result: too late
		}
		bad := ""
		switch h.Type {
		case wire.FrameStdin, wire.FrameEOF:
			switch {
			case x.stdin == nil:
				bad = "stdin on an exec call whose Exec announced none (stdin: false)"
			case !stdinOpen:
				bad = "stdin after stdin end of file"
			case h.Type == wire.FrameStdin:
				if err := x.queueStdin(b); err != nil {
					x.gone()
					x.next <- next{err: err}
					return
				}
			default:
				close(x.stdin)
				stdinOpen = false
			}
		case wire.FrameCall:
			bad = "a second call while an exec call runs (one call at a time per connection)"
		case wire.FrameCancel:
			var cn wire.Cancel
			if len(b) > 0 && wire.Decode(b, &cn) != nil {
				bad = "a malformed cancel frame"
				break
			}
			if cn.Signal != 0 && !validSignal(cn.Signal) {
				bad = fmt.Sprintf("a cancel with signal %d, which is not a signal (want 1 to %d)", cn.Signal, maxSignal)
				break
			}
			if cn.Signal > 0 {
				x.cancel(fmt.Errorf("%w: %w", errClientCancelled, &corral.StopCause{Signal: syscall.Signal(cn.Signal)}))
			} else {
				x.cancel(errClientCancelled)
			}
		case wire.FrameKill:
			x.cancel(errClientKilled)
			if x.onKill != nil {
				x.onKill()
			} else {
				x.escOnce.Do(func() { close(x.escalate) })
			}
		default:
			bad = fmt.Sprintf("a %q frame (want stdin, end of file, cancel or kill)", h.Type)
		}
		if bad != "" {
			x.violate(bad)
			x.next <- next{err: errBadStream}
			return
		}
	}
}

// gone stops the command of a client whose connection closed or broke.
func (x *execCall) gone() {
	x.mu.Lock()
	x.goneAt = time.Now()
	x.mu.Unlock()
	if x.onGone != nil {
		x.onGone() // a detached job's reader: the command goes on
		return
	}
	x.cancel(errClientGone)
}

// wentAway returns when the client was found gone (zero if it was not).
func (x *execCall) wentAway() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.goneAt
}

// queueStdin queues one stdin chunk for the command. While the queue is
// full (the command reads slowly or not at all) the connection is not
// read, so its end would go unnoticed behind the frames still unread:
// meanwhile the peer's hang-up is checked every hangupPoll, and a client
// that went away has abandoned its call (the error), which is then
// cancelled, instead of its command running on for ever.
func (x *execCall) queueStdin(b []byte) error {
	for {
		select {
		case x.stdin <- b:
			return nil
		case <-x.done:
			return nil
		case <-time.After(hangupPoll):
			if peerHungUp(x.c.Net()) {
				return errClientGone
			}
		}
	}
}

// hangupPoll is how often a full stdin queue checks that its client is
// still there.
const hangupPoll = 500 * time.Millisecond

func (x *execCall) violate(why string) {
	x.mu.Lock()
	if x.bad == "" {
		x.bad = why
	}
	x.mu.Unlock()
	x.cancel(fmt.Errorf("%w: %s", errBadStream, why))
}

func (x *execCall) violation() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.bad
}

// writeStdin writes the stdin chunks to the command's stdin pipe, in
// order, and closes it after the last; once the command is done (the pipe
// closed for reading) it drops the rest until chunks is closed.
func writeStdin(pw *io.PipeWriter, chunks <-chan []byte) {
	for b := range chunks {
		if _, err := pw.Write(b); err != nil {
			for range chunks {
			}
			return
		}
	}
	pw.Close()
}

// chunkWriter sends what is written as frames of at most MaxOutputChunk.
// A pointer, so that one writer for both streams is seen to be one
// (corral.SameWriter) and the command's output is merged in order.
type chunkWriter struct{ send func([]byte) error }

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), wire.MaxOutputChunk)
		if err := w.send(p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}
