// Package keeper is the process that holds one named session: it owns the
// session's shell, serves the Keeper API on a unix socket of its own, and
// outlives the daemon that started it, so that a daemon crash costs no
// session. The daemon finds it again through its durable record (pid, start
// time, boot id) and its socket.
package keeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corral-dev/corral"
	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/internal/unixsock"
	"github.com/corral-dev/corral/session"
)

// Config describes the keeper.
type Config struct {
	// Name is the session's name.
	Name string
	// Socket is the path of the unix socket to serve on (created 0600;
	// a stale socket file is replaced only if nothing answers on it).
	Socket string
	// Session configures the session's shell.
	Session session.Config
}

// Keeper serves one session.
type Keeper struct {
	cfg  Config
	sess *session.Session
	srv  *grpc.Server
	lis  net.Listener
	done chan struct{} // closed (once, by quit) when Shutdown is asked for
	quit sync.Once
	once sync.Once // stop
	pb.UnimplementedKeeperServer
}

// Listen creates the session and the socket. Serve then answers on it.
func Listen(cfg Config) (*Keeper, error) {
	s, err := session.New(cfg.Session)
	if err != nil {
		return nil, err
	}
	lis, err := unixsock.Listen(cfg.Socket)
	if err != nil {
		s.Close()
		return nil, err
	}
	k := &Keeper{cfg: cfg, sess: s, lis: lis, done: make(chan struct{}), srv: grpc.NewServer()}
	pb.RegisterKeeperServer(k.srv, k)
	return k, nil
}

// Serve answers requests until Shutdown is called or ctx ends; then the
// session (its whole tree) is closed.
func (k *Keeper) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- k.srv.Serve(k.lis) }()
	select {
	case <-ctx.Done():
	case <-k.done:
	case err := <-errc:
		k.sess.Close()
		return err
	}
	k.stop()
	return nil
}

func (k *Keeper) stop() {
	k.once.Do(func() {
		// Running commands end, and their results go out. A failure to
		// clean up goes to the keeper's log (its stderr).
		if err := k.sess.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "corral keeper %s: closing the session: %v\n", k.cfg.Name, err)
		}
		StopServer(k.srv, 5*time.Second)
		os.Remove(k.cfg.Socket)
	})
}

// StopServer stops srv gracefully, so that calls under way (a Shutdown's
// own answer, the result of a cancelled command) finish, but waits at most
// bound before closing whatever is left.
func StopServer(srv *grpc.Server, bound time.Duration) {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
		srv.Stop()
	}
}

// Info reports the session's state; it never waits for a running command.
func (k *Keeper) Info(ctx context.Context, _ *pb.KeeperInfoRequest) (*pb.KeeperInfo, error) {
	st := k.sess.State()
	return &pb.KeeperInfo{
		Pid: int32(os.Getpid()), Session: k.cfg.Name, Shell: k.cfg.Session.Shell,
		Cwd: st.Cwd, Env: st.Env, Busy: st.Busy, ShellPid: int32(st.Pid),
	}, nil
}

// Shutdown closes the session and ends Serve (the server stops gracefully,
// so this answer goes out). Asking twice is harmless.
func (k *Keeper) Shutdown(ctx context.Context, _ *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	k.quit.Do(func() { close(k.done) })
	return &pb.ShutdownResponse{}, nil
}

// Exec runs one command of the session. Output is sent as it is produced;
// the stream ending (the client went away) cancels the command.
func (k *Keeper) Exec(stream pb.Keeper_ExecServer) error {
	return ServeExec(stream, func(ctx context.Context, start *pb.ExecStart, opts session.Options) (*corral.Result, error) {
		if start.Oneshot {
			cfg := k.cfg.Session
			cfg.Dir, cfg.Env = start.Cwd, start.Env
			return session.RunOnce(ctx, cfg, start.Command, opts)
		}
		return k.sess.Exec(ctx, start.Command, opts)
	})
}

// execStream is the part of an Exec stream ServeExec uses (the daemon's and
// the keeper's are the same shape).
type execStream interface {
	Context() context.Context
	Recv() (*pb.ExecRequest, error)
	Send(*pb.ExecResponse) error
}

// ServeExec runs one Exec stream: it reads the ExecStart, feeds stdin
// messages to the command, sends its output as it comes and its result
// last. run does the running.
func ServeExec(stream execStream, run func(context.Context, *pb.ExecStart, session.Options) (*corral.Result, error)) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first message must be an ExecStart")
	}
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
	res, err := run(ctx, start, opts)
	if res == nil {
		return status.Error(codes.Internal, err.Error())
	}
	if errors.Is(err, session.ErrBadCommand) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return send(&pb.ExecResponse{Msg: &pb.ExecResponse_Result{Result: ResultToProto(res)}})
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
