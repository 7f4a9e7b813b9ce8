package daemon

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corral-dev/corral"
	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/session"
)

// serveExec runs the rest of one Exec stream whose ExecStart, start, was
// read and checked: it feeds stdin messages to the command, sends its
// output as it comes, has record save what the command changed (nil:
// nothing to save), and sends the result last. run does the running.
func serveExec(stream pb.Daemon_ExecServer, start *pb.ExecStart, run func(context.Context, session.Options) (*corral.Result, error), record func() error) error {
	ctx := stream.Context()
	var sendMu sync.Mutex
	send := func(r *pb.ExecResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	opts := session.Options{
		Stdout:    chunkWriter(func(b []byte) error { return send(&pb.ExecResponse{Msg: &pb.ExecResponse_Stdout{Stdout: b}}) }),
		Stderr:    chunkWriter(func(b []byte) error { return send(&pb.ExecResponse{Msg: &pb.ExecResponse_Stderr{Stderr: b}}) }),
		Timeout:   time.Duration(start.TimeoutMs) * time.Millisecond,
		MaxOutput: start.MaxOutput,
	}
	if start.Stdin {
		pr, pw := io.Pipe()
		opts.Stdin = pr
		go func() {
			for {
				m, err := stream.Recv()
				if err != nil {
					pw.CloseWithError(io.EOF)
					return
				}
				switch {
				case m.GetStdinEof():
					pw.Close()
					return
				case m.GetStdin() != nil:
					if _, err := pw.Write(m.GetStdin()); err != nil {
						return // the command stopped reading
					}
				}
			}
		}()
	}
	res, err := run(ctx, opts)
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
	return send(&pb.ExecResponse{Msg: &pb.ExecResponse_Result{Result: pres}})
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
	}
}
