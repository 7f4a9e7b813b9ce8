package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corral-dev/corral"
	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/session"
)

// DefaultSendStall is how long the daemon waits for a client to take one
// message of its command's output (the stream's flow-control window full)
// before it stops the command. A live client never comes near it: a
// reader descheduled, paging or swapping takes milliseconds to seconds,
// and a client's window and buffers hold megabytes. Yet it is well under
// the patience of the clients queued behind on the same session: an agent
// tool call is commonly cut at 60 s, a person waits less.
const DefaultSendStall = 30 * time.Second

// Why a command of an Exec stream was stopped, as the context's cause.
var (
	errClientCancelled  = errors.New("cancelled by the client")
	errClientKilled     = errors.New("killed at the client's request")
	errClientNotReading = errors.New("the client read none of the command's output")
	errBadStream        = errors.New("the client broke the Exec protocol")
)

// stdinQueue bounds the stdin messages received but not yet taken by the
// command: past it the daemon stops reading the stream (the client's
// sends block), so a cancel or kill sent behind undelivered stdin waits
// until the command reads or ends.
const stdinQueue = 16

// maxStdinChunk bounds one stdin message (the Go client sends 32 KiB), so
// that a stream holds at most stdinQueue of them (1 MiB) queued: with the
// 4 MiB bound of a gRPC message alone, 16 queued messages were 64 MiB per
// stream and 1.7 GB of RSS from 32 streams of one hostile client.
const maxStdinChunk = 64 << 10

// runFunc runs the command of an Exec stream.
type runFunc func(context.Context, session.Options) (*corral.Result, error)

// execStream is one Exec stream after its ExecStart: the receiver of the
// client's messages, the sender of output and result, and what the client
// asked for or did wrong.
type execStream struct {
	stream   pb.Daemon_ExecServer
	stall    time.Duration
	cancel   context.CancelCauseFunc // the command's context
	escalate chan struct{}           // closed by a kill message
	escOnce  sync.Once
	done     chan struct{} // closed when the command has returned
	stdin    chan []byte   // to the stdin writer; nil without stdin; closed by the receiver

	// sendMu orders sends (one message in flight) and guards the fields
	// that follow. out feeds the sender goroutine, which reports on sent
	// (capacity 1: a send given up on cannot block it).
	sendMu  sync.Mutex
	out     chan *pb.ExecResponse
	sent    chan error
	timer   *time.Timer
	stalled bool

	mu  sync.Mutex
	bad string // the first protocol violation
}

// serveExec runs the rest of one Exec stream whose ExecStart, start, was
// read and checked: it receives the client's stdin, cancel and kill
// messages, sends the command's output as it comes, has record save what
// the command changed (nil: nothing to save), and sends the result last.
//
// The stream's goroutines (the receiver, the stdin writer, the sender)
// end when it ends: gRPC ends a stream's pending Recv and Send when its
// handler returns.
func (d *Daemon) serveExec(stream pb.Daemon_ExecServer, start *pb.ExecStart, run runFunc, record func() error) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	stall := d.cfg.SendStall
	if stall <= 0 {
		stall = DefaultSendStall
	}
	x := &execStream{stream: stream, stall: stall, cancel: cancel, escalate: make(chan struct{}), done: make(chan struct{}),
		out: make(chan *pb.ExecResponse), sent: make(chan error, 1), timer: time.NewTimer(time.Hour)}
	x.timer.Stop()
	go func() {
		for r := range x.out {
			x.sent <- stream.Send(r)
		}
	}()
	defer func() {
		x.sendMu.Lock()
		close(x.out)
		x.sendMu.Unlock()
	}()
	opts := session.Options{
		Stdout:    chunkWriter(func(b []byte) error { return x.send(&pb.ExecResponse{Msg: &pb.ExecResponse_Stdout{Stdout: b}}) }),
		Stderr:    chunkWriter(func(b []byte) error { return x.send(&pb.ExecResponse{Msg: &pb.ExecResponse_Stderr{Stderr: b}}) }),
		Timeout:   time.Duration(start.TimeoutMs) * time.Millisecond,
		MaxOutput: start.MaxOutput,
		Escalate:  x.escalate,
		// The client's --grace and --signal, for this command only.
		Grace: time.Duration(start.GraceMs) * time.Millisecond,
	}
	if start.StopSignal > 0 {
		opts.StopSignal = syscall.Signal(start.StopSignal)
	}
	var stdin *io.PipeReader
	if start.Stdin {
		pr, pw := io.Pipe()
		opts.Stdin, stdin = pr, pr
		x.stdin = make(chan []byte, stdinQueue)
		go writeStdin(pw, x.stdin)
	}
	go x.receive()

	res, err := run(ctx, opts)
	close(x.done)
	if stdin != nil {
		stdin.CloseWithError(io.ErrClosedPipe) // the writer drops what is left
	}
	if res == nil {
		return status.Error(codes.Internal, err.Error())
	}
	if errors.Is(err, session.ErrBadCommand) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	pres := ResultToProto(res)
	if record != nil {
		if rerr := record(); rerr != nil {
			pres.StateNotSaved, pres.StateError = true, rerr.Error()
		}
	}
	what := start.Session
	if start.Oneshot {
		what = "oneshot"
	}
	if bad := x.violation(); bad != "" {
		d.cfg.Log.Warn("malformed Exec stream refused", "session", what, "err", bad, "outcome", res.Outcome)
		var fate string
		switch res.Outcome {
		case corral.OutcomeCancelled:
			fate = "the command was stopped"
		case corral.OutcomeStartFailed:
			fate = "the command did not run"
		default:
			fate = fmt.Sprintf("the command had ended (%s, exit %d)", res.Outcome, res.ExitCode)
		}
		if pres.StateNotSaved {
			fate += "; the session's state was not saved: " + pres.StateError
		}
		return status.Errorf(codes.InvalidArgument, "%s; %s", bad, fate)
	}
	if x.isStalled() {
		d.cfg.Log.Warn("client read none of its command's output; command stopped", "session", what,
			"bound", stall, "outcome", res.Outcome)
		return status.Errorf(codes.Aborted, "%v for %v: the daemon stopped the command", errClientNotReading, stall)
	}
	if err := x.send(&pb.ExecResponse{Msg: &pb.ExecResponse_Result{Result: pres}}); err != nil {
		if errors.Is(err, errClientNotReading) {
			d.cfg.Log.Warn("client read none of its command's output; result not sent", "session", what, "bound", stall)
			return status.Errorf(codes.Aborted, "%v for %v: the result could not be sent", errClientNotReading, stall)
		}
		return err
	}
	return nil
}

// send sends one message, waiting at most the stall bound for the client
// to take it. Past the bound the command is stopped and every later send
// fails at once (the command's output from then on is dropped).
func (x *execStream) send(r *pb.ExecResponse) error {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	if x.stalled {
		return errClientNotReading
	}
	x.out <- r // the sender is idle: the last send's outcome is in
	x.timer.Reset(x.stall)
	defer x.timer.Stop()
	select {
	case err := <-x.sent:
		return err
	case <-x.timer.C:
		x.stalled = true
		x.cancel(errClientNotReading)
		return errClientNotReading
	}
}

func (x *execStream) isStalled() bool {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	return x.stalled
}

// receive reads the client's messages until the stream ends or breaks the
// protocol. A violation stops the command (as a cancel: grace, then kill)
// and ends the reading; the call then fails with InvalidArgument.
func (x *execStream) receive() {
	stdinOpen := x.stdin != nil
	defer func() {
		if stdinOpen {
			close(x.stdin) // a client that stopped sending has no more stdin
		}
	}()
	for {
		m, err := x.stream.Recv()
		if err != nil {
			// io.EOF: the client sent all it will (not a cancel). Any
			// other error: the stream is gone, which ends the command's
			// context.
			return
		}
		switch msg := m.Msg.(type) {
		case *pb.ExecRequest_Stdin, *pb.ExecRequest_StdinEof:
			switch {
			case x.stdin == nil:
				x.violate("stdin on a stream whose ExecStart announced none (stdin: false)")
				return
			case !stdinOpen:
				x.violate("stdin after stdin_eof")
				return
			}
			if in, ok := msg.(*pb.ExecRequest_Stdin); ok {
				if len(in.Stdin) > maxStdinChunk {
					x.violate(fmt.Sprintf("a stdin message of %d bytes (at most %d KiB each)", len(in.Stdin), maxStdinChunk>>10))
					return
				}
				select {
				case x.stdin <- in.Stdin:
				case <-x.done:
				}
				continue
			}
			close(x.stdin)
			stdinOpen = false
		case *pb.ExecRequest_Start:
			x.violate("a second ExecStart on one stream (one command per stream)")
			return
		case *pb.ExecRequest_Cancel:
			x.cancel(errClientCancelled)
		case *pb.ExecRequest_CancelSignal:
			x.cancel(fmt.Errorf("%w: %w", errClientCancelled, &corral.StopCause{Signal: syscall.Signal(msg.CancelSignal)}))
		case *pb.ExecRequest_Kill:
			x.cancel(errClientKilled)
			x.escOnce.Do(func() { close(x.escalate) })
		default:
			x.violate("an empty message (neither stdin, stdin_eof, cancel nor kill)")
			return
		}
	}
}

func (x *execStream) violate(why string) {
	x.mu.Lock()
	if x.bad == "" {
		x.bad = why
	}
	x.mu.Unlock()
	x.cancel(fmt.Errorf("%w: %s", errBadStream, why))
}

func (x *execStream) violation() string {
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

// chunkWriter sends each Write as one message (copying: the caller reuses
// its buffer).
type chunkWriter func([]byte) error

func (w chunkWriter) Write(p []byte) (int, error) {
	if err := w(append([]byte(nil), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ResultToProto converts a result for the wire.
func ResultToProto(r *corral.Result) *pb.Result {
	first := int64(-1)
	if r.FirstOutput >= 0 {
		first = r.FirstOutput.Microseconds()
	}
	var started int64
	if !r.StartedAt.IsZero() {
		started = r.StartedAt.UnixNano()
	}
	return &pb.Result{
		Outcome: string(r.Outcome), ExitCode: int32(r.ExitCode), Signal: int32(r.Signal),
		StartedUnixNano: started, DurationUs: r.Duration.Microseconds(), FirstOutputUs: first,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Error: r.Error,
		KillFailed: r.KillFailed, DrainCutOff: r.DrainCutOff,
		Pid: int32(r.Pid), Isolation: r.Isolation, Cgroup: r.Cgroup,
		DescendantsKilled: int32(r.DescendantsKilled), ProcessesStopped: int32(r.ProcessesStopped),
	}
}
