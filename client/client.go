// Package client talks to a running corral daemon from Go: run commands in
// named sessions, list and end them.
//
//	c, err := client.Dial(stateDir) // "" for the default state directory
//	res, err := c.Exec(ctx, "build", "make -j8", client.ExecOptions{Stdout: os.Stdout})
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/corral-dev/corral"
	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/statedir"
)

// Client is a connection to a daemon. It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	api  pb.DaemonClient
}

// Dial connects to the daemon serving stateDir ("" means the default
// state directory). It does not start one. A state directory corral
// would refuse (a link, another user's, writable by others: see
// statedir.Ensure) is refused here too, before anything is sent.
func Dial(stateDir string) (*Client, error) {
	if stateDir == "" {
		var err error
		if stateDir, err = statedir.Path(); err != nil {
			return nil, err
		}
	}
	// A socket in a directory someone else controls is theirs to serve.
	if err := statedir.Verify(stateDir); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix:"+daemon.SocketPath(stateDir), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, api: pb.NewDaemonClient(conn)}, nil
}

// FromConn makes a Client of an established connection to a daemon.
func FromConn(conn *grpc.ClientConn) *Client {
	return &Client{conn: conn, api: pb.NewDaemonClient(conn)}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ExecOptions are the settings of one command.
type ExecOptions struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Timeout        time.Duration
	MaxOutput      int64
	// Oneshot runs the command in a fresh contained shell.
	Oneshot bool
	// Dir and Env are a new session's initial directory and environment
	// (and a oneshot command's); "" and nil mean this process's.
	Dir string
	Env []string
	// Interrupt, when closed, has the daemon stop the command as a timeout
	// does (SIGTERM to its tree, the session's grace, then SIGKILL); Exec
	// goes on streaming and returns the result once the tree is gone.
	// Kill, when closed, has the daemon kill the tree at once (also during
	// an Interrupt's grace). Cancelling ctx instead abandons the call: the
	// daemon stops the command, and Exec returns without waiting for it.
	Interrupt, Kill <-chan struct{}
	// Grace, if not 0, replaces the session's grace period for this
	// command (negative: SIGKILL at once); StopSignal, if not 0, is the
	// first signal a timeout or Interrupt sends instead of SIGTERM.
	Grace      time.Duration
	StopSignal syscall.Signal
	// InterruptSignal, if set, is called once Interrupt is closed: the
	// signal the daemon sends the tree first (a front-end forwards the
	// SIGINT or SIGHUP it received); 0 means SIGTERM.
	InterruptSignal func() syscall.Signal
}

func (o *ExecOptions) interruptSignal() syscall.Signal {
	if o.InterruptSignal == nil {
		return 0
	}
	return o.InterruptSignal()
}

// ErrStateNotSaved means a command ran but its session's state after it
// (cwd, exported environment) could not be recorded durably: the live
// shell has it, a reboot or a crash of the daemon may lose it. Exec
// returns it, wrapped with the daemon's reason, with the result.
var ErrStateNotSaved = errors.New("the session's state (cwd, environment) was not saved")

// StateNotSavedError is ErrStateNotSaved with the daemon's reason.
type StateNotSavedError struct{ Reason string }

func (e *StateNotSavedError) Error() string { return ErrStateNotSaved.Error() + ": " + e.Reason }
func (e *StateNotSavedError) Unwrap() error { return ErrStateNotSaved }

// Exec runs code in session name (created on first use) and returns its
// result. Cancelling ctx cancels the command (and resets the session)
// without waiting for it; o.Interrupt and o.Kill stop it and wait.
//
// The error is nil only if the command exited 0 and its state was
// recorded; otherwise, with a result, it is a *corral.RunError, or
// a *StateNotSavedError, or both (errors.Join).
func (c *Client) Exec(ctx context.Context, name, code string, o ExecOptions) (*corral.Result, error) {
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Dir == "" {
		o.Dir, _ = os.Getwd()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.api.Exec(ctx)
	if err != nil {
		return nil, err
	}
	start := &pb.ExecStart{Session: name, Command: code, TimeoutMs: o.Timeout.Milliseconds(), MaxOutput: o.MaxOutput,
		Oneshot: o.Oneshot, Cwd: o.Dir, Env: o.Env, Stdin: o.Stdin != nil,
		GraceMs: o.Grace.Milliseconds(), StopSignal: int32(o.StopSignal)}
	if o.Grace < 0 {
		start.GraceMs = -1
	}
	if err := st.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: start}}); err != nil {
		return nil, err
	}
	// gRPC allows one Send at a time; stdin, cancel and kill share the
	// stream. After an interrupt no more stdin is sent (a send of stdin
	// the daemon is not taking, blocked on flow control, holds the stream
	// until the daemon reads on).
	var sendMu sync.Mutex
	var stopped atomic.Bool
	send := func(m *pb.ExecRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(m)
	}
	if o.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := o.Stdin.Read(buf)
				if stopped.Load() {
					return
				}
				if n > 0 && send(&pb.ExecRequest{Msg: &pb.ExecRequest_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
					return
				}
				if err != nil {
					send(&pb.ExecRequest{Msg: &pb.ExecRequest_StdinEof{StdinEof: true}})
					return
				}
			}
		}()
	}
	if o.Interrupt != nil || o.Kill != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			interrupt, kill := o.Interrupt, o.Kill
			for interrupt != nil || kill != nil {
				select {
				case <-done:
					return
				case <-interrupt:
					interrupt = nil
					stopped.Store(true)
					if sig := o.interruptSignal(); sig != 0 && sig != syscall.SIGTERM {
						send(&pb.ExecRequest{Msg: &pb.ExecRequest_CancelSignal{CancelSignal: int32(sig)}})
					} else {
						send(&pb.ExecRequest{Msg: &pb.ExecRequest_Cancel{Cancel: true}})
					}
				case <-kill:
					kill = nil
					stopped.Store(true)
					send(&pb.ExecRequest{Msg: &pb.ExecRequest_Kill{Kill: true}})
				}
			}
		}()
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return nil, err
		}
		switch x := m.Msg.(type) {
		case *pb.ExecResponse_Stdout:
			if o.Stdout != nil {
				o.Stdout.Write(x.Stdout)
			}
		case *pb.ExecResponse_Stderr:
			if o.Stderr != nil {
				o.Stderr.Write(x.Stderr)
			}
		case *pb.ExecResponse_Result:
			res := ResultFromProto(x.Result)
			var errs []error
			if res.Outcome != corral.OutcomeExited || res.ExitCode != 0 {
				errs = append(errs, &corral.RunError{Result: res})
			}
			if x.Result.StateNotSaved {
				errs = append(errs, &StateNotSavedError{Reason: x.Result.StateError})
			}
			if len(errs) == 1 {
				return res, errs[0]
			}
			return res, errors.Join(errs...)
		}
	}
}

// Session describes one session as the daemon lists it.
type Session struct {
	Name, State, Shell, Cwd string
	Created, LastUsed       time.Time
	// KeeperPid is the pid of the session's shell, which holds the
	// session (0 when it is down).
	KeeperPid int
	// Busy says a command is running; Reason says why a session is broken.
	Busy   bool
	Reason string
}

// List lists the sessions.
func (c *Client) List(ctx context.Context) ([]Session, error) {
	resp, err := c.api.List(ctx, &pb.ListRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]Session, 0, len(resp.Sessions))
	for _, s := range resp.Sessions {
		out = append(out, Session{Name: s.Name, State: s.State, Shell: s.Shell, Cwd: s.Cwd,
			Created: time.Unix(s.CreatedUnix, 0), LastUsed: time.Unix(s.LastUsedUnix, 0), KeeperPid: int(s.KeeperPid),
			Busy: s.Busy, Reason: s.Reason})
	}
	return out, nil
}

// Kill ends the named sessions (all of them with all set).
func (c *Client) Kill(ctx context.Context, all bool, names ...string) error {
	_, err := c.api.Kill(ctx, &pb.KillRequest{Names: names, All: all})
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	return nil
}

// ResultFromProto converts a result from the wire.
func ResultFromProto(r *pb.Result) *corral.Result {
	res := &corral.Result{Outcome: corral.Outcome(r.Outcome), ExitCode: int(r.ExitCode), Signal: int(r.Signal),
		Duration: time.Duration(r.DurationUs) * time.Microsecond, FirstOutput: -1,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Error: r.Error,
		KillFailed: r.KillFailed, DrainCutOff: r.DrainCutOff,
		Pid: int(r.Pid), Pgid: int(r.Pid), Isolation: r.Isolation, Cgroup: r.Cgroup,
		DescendantsKilled: int(r.DescendantsKilled), ProcessesStopped: int(r.ProcessesStopped)}
	if r.FirstOutputUs >= 0 {
		res.FirstOutput = time.Duration(r.FirstOutputUs) * time.Microsecond
	}
	if r.StartedUnixNano != 0 {
		res.StartedAt = time.Unix(0, r.StartedUnixNano)
		res.EndedAt = res.StartedAt.Add(res.Duration)
	}
	return res
}
