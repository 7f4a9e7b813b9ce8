package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/wire"
)

// Detached jobs (wire/jobs.go). An exec call that asked to detach on
// disconnect runs its command on a goroutine of its own, owned by the
// server (counted in calls while it runs, so a drain waits for it, and in
// conned, so a stop waits for it to return), and its output goes to a job
// log instead of straight to the connection. Every client of the job (the
// exec call's own, then any resume call) is a reader of that log: it sends
// from its offset on, then the result. So a client that goes away costs
// the command nothing: its reader ends, the command goes on, and its
// output is kept for the next reader.
//
// What is kept is bounded: the newest jobKeep bytes of a job's output (the
// log drops its oldest chunks past that), at most maxJobs jobs at once
// (running or finished), each finished job for jobLinger after it ended.
// A reader attached to a job is never skipped over: while the log would
// drop bytes a reader has not taken yet, the command's writes wait for it
// (as a plain exec waits for its client), up to the send-stall bound;
// past that the reader is dropped (its connection is closed, as a client
// that went away) and the job goes on without it. With no reader,
// the command never waits.
const (
	jobKeep   = 4 << 20
	maxJobs   = 16
	jobLinger = time.Hour
)

// jobs are the detached jobs a server keeps.
type jobs struct {
	// mu guards byID.
	mu   sync.Mutex
	byID map[string]*job
}

// job is one detached command: its log, its readers, its result.
type job struct {
	id      string
	owner   daemon.Peer
	what    string // the session's name, or "oneshot"
	stall   time.Duration
	cancel  func(error) // cancels the command's context
	killed  sync.Once
	kill    chan struct{} // closed at a kill frame: Options.Escalate
	done    chan struct{} // closed when the command has returned
	orphan  bool          // guarded by mu: the exec call's own reader has gone
	started time.Time

	// mu guards the fields that follow; cond is signalled whenever one
	// changes.
	mu     sync.Mutex
	cond   *sync.Cond
	chunks []jobChunk // the kept output, oldest first
	start  int64      // the offset of chunks[0] (what was dropped before)
	end    int64      // the offset past the last byte
	kept   int
	// readers are the attached readers.
	readers map[*jobReader]struct{}
	// ended is when the command returned; resTyp and res its last frame.
	ended  time.Time
	resTyp byte
	res    []byte
}

// jobChunk is output of one stream; b is never changed once written
// (appending past its length is: a reader holds a slice of it).
type jobChunk struct {
	typ byte
	off int64
	b   []byte
}

// jobReader is one client's place in a job's log.
type jobReader struct {
	off    int64
	gone   bool // its client went away
	kicked bool // it fell behind the log for the stall bound
}

// add makes a job for peer's command on what (a session, or oneshot),
// dropping the oldest finished job if maxJobs are kept already.
func (js *jobs) add(peer daemon.Peer, what string, stall time.Duration, cancel func(error)) (*job, error) {
	var b [8]byte
	rand.Read(b[:])
	j := &job{id: "j" + hex.EncodeToString(b[:]), owner: peer, what: what, stall: stall, cancel: cancel,
		kill: make(chan struct{}), done: make(chan struct{}), readers: map[*jobReader]struct{}{}, started: time.Now()}
	j.cond = sync.NewCond(&j.mu)
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.byID == nil {
		js.byID = map[string]*job{}
	}
	js.expireLocked()
	if len(js.byID) >= maxJobs {
		var oldest *job
		for _, o := range js.byID {
			if t, ok := o.endedAt(); ok && (oldest == nil || t.Before(oldest.ended)) {
				oldest = o
			}
		}
		if oldest == nil {
			return nil, fmt.Errorf("%w: the daemon keeps %d detached jobs already, all running: resume one (corral exec --resume JOB) or wait for one to end, or run this without --detach-on-disconnect",
				errJobsFull, maxJobs)
		}
		delete(js.byID, oldest.id)
	}
	js.byID[j.id] = j
	return j, nil
}

// errJobsFull: every job slot holds a running job.
var errJobsFull = errors.New("too many detached jobs")

// expireLocked drops the jobs that ended more than jobLinger ago.
func (js *jobs) expireLocked() {
	for id, j := range js.byID {
		if t, ok := j.endedAt(); ok && time.Since(t) > jobLinger {
			delete(js.byID, id)
		}
	}
}

// get returns the job id for peer: the identity that started it, or a
// local client (the daemon's own uid).
func (js *jobs) get(peer daemon.Peer, id string) (*job, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.expireLocked()
	j := js.byID[id]
	if j == nil || peer.Remote() && (j.owner.Name != peer.Name || !j.owner.Remote()) {
		return nil, fmt.Errorf("%w: no job %q for %s (a job is kept %v after its command ended, at most %d jobs; only the identity that started it, or a local client, may resume it)",
			daemon.ErrNotFound, id, peer, jobLinger, maxJobs)
	}
	return j, nil
}

// running counts the jobs whose command runs with no client of the exec
// call that started it: calls a drain waits for that hold no connection.
func (js *jobs) running() int {
	js.mu.Lock()
	defer js.mu.Unlock()
	n := 0
	for _, j := range js.byID {
		j.mu.Lock()
		if j.orphan && j.ended.IsZero() {
			n++
		}
		j.mu.Unlock()
	}
	return n
}

func (j *job) endedAt() (time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ended, !j.ended.IsZero()
}

// killTree closes kill once (a kill frame from any of its readers).
func (j *job) killTree() { j.killed.Do(func() { close(j.kill) }) }

// jobWriter writes a command's output of one stream to its job's log; one
// writer for both streams when they are merged (corral.SameWriter).
type jobWriter struct {
	j   *job
	typ byte
}

func (w *jobWriter) Write(p []byte) (int, error) {
	w.j.write(w.typ, p)
	return len(p), nil
}

// write appends p to the log, first dropping its oldest bytes past
// jobKeep: if an attached reader has not taken them yet, it waits for
// that reader up to the stall bound, then drops the reader.
func (j *job) write(typ byte, p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var timer *time.Timer
	expired := false
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for j.kept+len(p) > jobKeep && len(j.chunks) > 0 {
		front := j.chunks[0]
		frontEnd := front.off + int64(len(front.b))
		var behind []*jobReader
		for r := range j.readers {
			if !r.gone && !r.kicked && r.off < frontEnd {
				behind = append(behind, r)
			}
		}
		if len(behind) > 0 {
			if expired {
				for _, r := range behind {
					r.kicked = true
				}
				j.cond.Broadcast()
				continue
			}
			if timer == nil {
				timer = time.AfterFunc(j.stall, func() {
					j.mu.Lock()
					expired = true
					j.cond.Broadcast()
					j.mu.Unlock()
				})
			}
			j.cond.Wait()
			continue
		}
		j.chunks[0] = jobChunk{}
		j.chunks = j.chunks[1:]
		j.kept -= len(front.b)
		j.start = frontEnd
	}
	// Small writes are joined into frames of up to wire.MaxOutputChunk.
	if n := len(j.chunks); n > 0 && j.chunks[n-1].typ == typ && len(j.chunks[n-1].b)+len(p) <= wire.MaxOutputChunk {
		j.chunks[n-1].b = append(j.chunks[n-1].b, p...)
	} else {
		j.chunks = append(j.chunks, jobChunk{typ: typ, off: j.end, b: append(make([]byte, 0, max(len(p), 4<<10)), p...)})
	}
	j.kept += len(p)
	j.end += int64(len(p))
	j.cond.Broadcast()
}

// finish records the command's last frame and ends the job's command.
//
// done is closed before the lock is let go, so no reader can send the
// last frame before it is: a client given the last frame may send its
// next call on the same connection at once, and the call's reader
// (execCall.receive) takes a call frame for the next call only once done
// is closed; before, it could take it for a second call during this one
// and close the connection.
func (j *job) finish(typ byte, payload []byte) {
	j.mu.Lock()
	j.ended, j.resTyp, j.res = time.Now(), typ, payload
	close(j.done)
	j.cond.Broadcast()
	j.mu.Unlock()
	if testHookJobFinished != nil {
		testHookJobFinished()
	}
}

// testHookJobFinished, if set, runs when a job has recorded its end.
var testHookJobFinished func()

// attach adds a reader at off, which must be within what the log holds
// (or what it will hold: the end, while the command runs).
func (j *job) attach(off int64) (*jobReader, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if off < j.start || off > j.end {
		return nil, fmt.Errorf("%w: job %s keeps bytes %d to %d of its output (the newest %d MiB), not offset %d",
			daemon.ErrBadRequest, j.id, j.start, j.end, jobKeep>>20, off)
	}
	r := &jobReader{off: off}
	j.readers[r] = struct{}{}
	return r, nil
}

// detach removes r.
func (j *job) detach(r *jobReader) {
	j.mu.Lock()
	delete(j.readers, r)
	j.cond.Broadcast()
	j.mu.Unlock()
}

// leave marks r's client gone (its reader stops waiting).
func (j *job) leave(r *jobReader) {
	j.mu.Lock()
	r.gone = true
	j.cond.Broadcast()
	j.mu.Unlock()
}

// next waits for what r is to send next: output from its offset (as one
// frame), or, once it has sent it all and the command ended, the last
// frame (last). It fails if r's client went away or r was dropped.
func (j *job) next(r *jobReader) (typ byte, b []byte, last bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		switch {
		case r.gone:
			return 0, nil, false, errClientGone
		case r.kicked || r.off < j.start:
			return 0, nil, false, errClientNotReading
		case r.off < j.end:
			i := sort.Search(len(j.chunks), func(i int) bool { return j.chunks[i].off+int64(len(j.chunks[i].b)) > r.off })
			c := j.chunks[i]
			b = c.b[r.off-c.off:]
			r.off += int64(len(b))
			j.cond.Broadcast() // a write may wait for r
			return c.typ, b, false, nil
		case !j.ended.IsZero():
			return j.resTyp, j.res, true, nil
		}
		j.cond.Wait()
	}
}

// resultFrame is the last frame of an exec call whose command returned
// res, err: its Result, or the Error of a command that did not run.
func resultFrame(res *daemon.ExecResult, err error) (byte, []byte) {
	if err != nil {
		return wire.FrameError, mustJSON(wireErr(err))
	}
	return wire.FrameReply, mustJSON(wireResult(res))
}

// execDetached runs an exec call that asked to detach on disconnect: the
// command on a goroutine of its own, its output to a job log, and this
// call as the job's first reader (see the top of this file).
func (s *Server) execDetached(c *wire.Conn, peer daemon.Peer, e *wire.Exec, req daemon.ExecRequest) (func() (wire.Header, error), bool) {
	what := e.Session
	if e.Oneshot {
		what = "oneshot"
	}
	ctx, cancelCtx := context.WithCancelCause(context.Background())
	var clock stopClock
	cancel := clock.wrap(cancelCtx)
	j, err := s.jobs.add(peer, what, s.stall, cancel)
	if err != nil {
		cancel(nil)
		if errors.Is(err, errJobsFull) {
			return func() (wire.Header, error) { return c.ReadHeader() }, s.answer(c, wire.FrameError, &wire.Error{Kind: wire.KindBusy, Message: err.Error()})
		}
		return func() (wire.Header, error) { return c.ReadHeader() }, s.answer(c, wire.FrameError, wireErr(err))
	}
	s.ops.fleet.jobs.Add(1)
	r, _ := j.attach(0)
	// The job's id first, so that a client cut off at any later moment
	// can resume it.
	if !s.answer(c, wire.FrameJob, wire.Job{Job: j.id}) {
		cancel(nil)
		j.finish(resultFrame(nil, fmt.Errorf("%w: the client went away before its command started", daemon.ErrBadRequest)))
		return nil, false
	}
	x := &execCall{c: c, stall: s.stall, cancel: cancel, escalate: j.kill, done: j.done, next: make(chan next, 1),
		onKill: j.killTree, onGone: func() { j.leave(r) }}
	out := &jobWriter{j, wire.FrameStdout}
	req.Options.Stdout, req.Options.Stderr = out, out
	if !e.Merge {
		req.Options.Stderr = &jobWriter{j, wire.FrameStderr}
	}
	req.Options.Escalate = j.kill
	var stdin *io.PipeReader
	if e.Stdin {
		pr, pw := io.Pipe()
		req.Options.Stdin, stdin = pr, pr
		x.stdin = make(chan []byte, stdinQueue)
		go writeStdin(pw, x.stdin)
	}
	s.calls.Add(1)
	s.conned.Add(1)
	go func() {
		defer s.conned.Done()
		defer s.calls.Done()
		defer cancel(nil)
		res, err := s.d.Exec(ctx, peer, req)
		s.count(e.Oneshot, res, err)
		s.ops.fleet.stopped(res, req.Options.Timeout, &clock)
		if stdin != nil {
			stdin.CloseWithError(io.ErrClosedPipe)
		}
		j.finish(resultFrame(res, err))
		if res != nil {
			s.cfg.Log.Info("detached job ended", "job", j.id, "session", what, "peer", peer.String(), "outcome", res.Outcome,
				"exit_code", res.ExitCode, "output_bytes", j.end)
		}
	}()
	go x.receive()
	if !s.stream(x, j, r, true) {
		return nil, false
	}
	return x.following, true
}

// resume serves a resume call: the job's output from the offset, then its
// last frame, to this client.
func (s *Server) resume(c *wire.Conn, peer daemon.Peer, rs *wire.Resume) (func() (wire.Header, error), bool) {
	direct := func() (wire.Header, error) { return c.ReadHeader() }
	if rs == nil {
		return direct, s.answer(c, wire.FrameError, wireErr(fmt.Errorf("%w: a resume call without its resume", daemon.ErrBadRequest)))
	}
	if err := s.d.Authorize(peer); err != nil {
		return direct, s.answer(c, wire.FrameError, wireErr(err))
	}
	j, err := s.jobs.get(peer, rs.Job)
	if err != nil {
		return direct, s.answer(c, wire.FrameError, wireErr(err))
	}
	r, err := j.attach(rs.Offset)
	if err != nil {
		return direct, s.answer(c, wire.FrameError, wireErr(err))
	}
	x := &execCall{c: c, stall: s.stall, cancel: j.cancel, escalate: j.kill, done: j.done, next: make(chan next, 1),
		onKill: j.killTree, onGone: func() { j.leave(r) }}
	s.cfg.Log.Info("detached job resumed", "job", j.id, "session", j.what, "peer", peer.String(), "remote", peer.Addr, "offset", rs.Offset)
	go x.receive()
	if !s.stream(x, j, r, false) {
		return nil, false
	}
	return x.following, true
}

// stream sends j's output to x's client from r's offset, then the job's
// last frame, each frame within the stall bound. It reports whether the
// client got it all (the connection then serves its next call); if not,
// the client is gone or was dropped, the connection is to be closed, and
// the command goes on. first marks the exec call's own reader.
func (s *Server) stream(x *execCall, j *job, r *jobReader, first bool) bool {
	defer j.detach(r)
	nc := x.c.Net()
	for {
		typ, b, last, err := j.next(r)
		if err == nil {
			nc.SetWriteDeadline(time.Now().Add(s.stall))
			_, _, err = x.c.Write(typ, b)
			nc.SetWriteDeadline(time.Time{})
			if err != nil && timedOut(err) {
				err = errClientNotReading
			}
		}
		if err == nil && last {
			return true
		}
		if err == nil {
			continue
		}
		how := "the client went away"
		if errors.Is(err, errClientNotReading) {
			how = "the client read none of the output for the stall bound"
		}
		j.mu.Lock()
		if first {
			j.orphan = true
		}
		off, running := r.off, j.ended.IsZero()
		j.mu.Unlock()
		if running {
			s.cfg.Log.Info("client went away; its command goes on as a detached job", "job", j.id, "session", j.what, "why", how,
				"peer", j.owner.String(), "remote", j.owner.Addr, "sent", off)
		}
		nc.Close()
		return false
	}
}
