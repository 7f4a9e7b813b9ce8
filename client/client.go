// Package client talks to a corral daemon from Go: run commands in named
// sessions or oneshot shells, list and end sessions, ask the daemon how it
// is and stop it. It is the one client: the corral CLI and its MCP server
// use it too.
//
//	c, err := client.Dial(ctx, "", client.StartDaemon("")) // the default state directory; start corral on demand
//	res, err := c.Exec(ctx, "build", "make -j8", client.ExecOptions{Stdout: os.Stdout})
//
// Shell code, environments, directories and a session's cwd are bytes,
// as on Unix, and are carried exactly, UTF-8 or not (protocol 2: see
// internal/wire); to a daemon too old for that, Exec refuses code,
// environment or paths that are not UTF-8 (ErrBadRequest) rather than
// have them run changed.
//
// The API has no transport types; errors say what happened through the
// sentinels below (errors.Is): ErrNotFound, ErrSessionClosed,
// ErrDaemonStopping, ErrBroken, ErrStateNotSaved, ErrLost, and the rest.
// The protocol is internal/wire's.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/fds"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/wire"
)

// The errors of a call (errors.Is). Each is what the daemon said (its
// message wrapped around it), or, for ErrLost and ErrNoDaemon, what this
// client found.
var (
	// ErrBadRequest: the daemon refused the request as given; nothing
	// was created or run.
	ErrBadRequest = wire.ErrBadRequest
	// ErrNotFound: no session of that name.
	ErrNotFound = wire.ErrNotFound
	// ErrSessionClosed: the session was killed or closed under the call.
	ErrSessionClosed = wire.ErrSessionClosed
	// ErrDaemonStopping: the daemon is stopping and starts nothing now.
	ErrDaemonStopping = wire.ErrStopping
	// ErrBroken: the session's shell can be neither taken over nor
	// settled; Kill drops it.
	ErrBroken = wire.ErrBroken
	// ErrRecovering: the session is still being recovered after a
	// restart of the daemon; try again.
	ErrRecovering = wire.ErrRecovering
	// ErrBusy: the session is busy.
	ErrBusy = wire.ErrBusy
	// ErrPermission: this process may not use the daemon.
	ErrPermission = wire.ErrPermission
	// ErrNotReading: this client read none of its command's output within
	// the daemon's bound, and the daemon stopped the command.
	ErrNotReading = wire.ErrNotReading
	// ErrStateNotSaved: a command ran but its session's state after it
	// (cwd, exported environment) could not be recorded durably: the live
	// shell has it, a reboot or a crash of the daemon may lose it. Exec
	// returns it, as a *StateNotSavedError, with the result.
	ErrStateNotSaved = wire.ErrStateNotSaved
	// ErrNoDaemon: no daemon answers on the target (and none was to be
	// started).
	ErrNoDaemon = errors.New("no daemon is running")
	// ErrLost: the connection to the daemon broke during a call (the
	// daemon died or stopped); a command it was running may have run.
	ErrLost = errors.New("lost the daemon")
)

// StateNotSavedError is ErrStateNotSaved with the daemon's reason.
type StateNotSavedError struct{ Reason string }

func (e *StateNotSavedError) Error() string { return ErrStateNotSaved.Error() + ": " + e.Reason }
func (e *StateNotSavedError) Unwrap() error { return ErrStateNotSaved }

// lostError is ErrLost, with what broke.
type lostError struct{ err error }

func (e *lostError) Error() string   { return ErrLost.Error() + ": " + e.err.Error() }
func (e *lostError) Unwrap() []error { return []error{ErrLost, e.err} }

// Client is a connection to a daemon. It is safe for concurrent use: each
// call has a connection of its own while it runs (the protocol serves one
// call at a time per connection), and a few idle ones are kept for reuse.
type Client struct {
	sock     string
	stateDir string // "" when the target was a socket
	addr     string // a remote daemon's HOST:PORT, "" for a local one
	tlsConf  *tls.Config
	pid      atomic.Int64 // the daemon's, from its last Welcome (connections are made concurrently)

	// mu guards the fields that follow.
	mu     sync.Mutex
	idle   []idleConn
	closed bool
}

// maxIdle bounds the idle connections a Client keeps, and maxIdleAge how
// long one is kept: well under the daemon's wire.IdleBound, past which it
// closes them.
const (
	maxIdle    = 4
	maxIdleAge = wire.IdleBound / 2
)

type idleConn struct {
	wc    *wire.Conn
	since time.Time
}

// Option is an option of Dial.
type Option func(*options)

type options struct {
	start  bool
	corral string
	tlsDir string
}

// StartDaemon has Dial start a daemon for the target's state directory
// when none answers, by running the corral binary at path ("" means
// "corral" on $PATH) as "corral daemon", detached, logging to the state
// directory's daemon.log. Of many clients that find no daemon at once,
// one starts it and the others wait for it.
func StartDaemon(path string) Option {
	return func(o *options) { o.start, o.corral = true, path }
}

// spawnWait bounds how long Dial waits for a daemon to start (its own, or
// one another client is starting) and to answer.
const spawnWait = 10 * time.Second

// Dial connects to the daemon of target: a state directory ("" means the
// default one, $CORRAL_STATE_DIR or the user's), the path of a daemon's
// socket, or the HOST:PORT of a remote daemon (with TLS, which see). A state
// directory corral would refuse (a link, another user's, writable by
// others: see internal/statedir) is refused before anything is sent: a
// socket in a directory someone else controls is theirs to serve. Dial
// returns once the daemon has answered the handshake.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	c := &Client{}
	switch fi, err := os.Stat(target); {
	case err != nil && isHostPort(target):
		if err := c.dialRemote(target, &o); err != nil {
			return nil, err
		}
	case target == "":
		dir, err := statedir.Path()
		if err != nil {
			return nil, err
		}
		c.stateDir = dir
	case err == nil && fi.Mode()&os.ModeSocket != 0:
		c.sock = target
		if err := statedir.Verify(filepath.Dir(target)); err != nil {
			return nil, err
		}
	case err == nil && fi.IsDir(), errors.Is(err, os.ErrNotExist) && strings.ContainsRune(target, os.PathSeparator):
		c.stateDir = target
	case err != nil:
		// A link planted in a sticky directory cannot be followed at all
		// where fs.protected_symlinks is on (Debian's kernels, systemd's
		// default): the stat fails with EACCES, and the reason is the link.
		if verr := statedir.Verify(target); errors.Is(verr, statedir.ErrUnsafe) {
			return nil, verr
		}
		return nil, fmt.Errorf("dial %s: %w", target, err)
	default:
		return nil, fmt.Errorf("dial %s: neither a state directory nor a daemon's socket", target)
	}
	if c.stateDir != "" {
		if o.start {
			dir, err := statedir.Ensure(c.stateDir)
			if err != nil {
				return nil, err
			}
			c.stateDir = dir
		} else if err := statedir.Verify(c.stateDir); err != nil {
			return nil, err
		}
		c.sock = wire.SocketPath(c.stateDir)
	}
	if o.tlsDir != "" && c.addr == "" {
		return nil, fmt.Errorf("dial %s: TLS credentials are for a remote daemon (HOST:PORT), not a local one", target)
	}
	started, retried := false, false
	for {
		wc, err := c.connect(ctx)
		if err == nil {
			c.idle = append(c.idle, idleConn{wc, time.Now()})
			return c, nil
		}
		if c.addr != "" {
			return nil, err // no start on demand, no second look
		}
		if notListening(err) {
			if !o.start || c.stateDir == "" || started {
				return nil, fmt.Errorf("%w for %s", ErrNoDaemon, c.target())
			}
			if err := startDaemon(ctx, c.stateDir, o.corral, c.listening); err != nil {
				return nil, err
			}
			started = true
			continue
		}
		// A daemon dying as this client arrived can take the connection
		// and reset it. No call has been sent yet, so it is safe to look
		// again (and start a daemon) once.
		var we *wire.Error
		if errors.As(err, &we) || retried || ctx.Err() != nil {
			return nil, err
		}
		retried = true
	}
}

func (c *Client) target() string {
	if c.addr != "" {
		return c.addr
	}
	if c.stateDir != "" {
		return c.stateDir
	}
	return c.sock
}

// notListening reports whether err says nothing listens on the socket.
func notListening(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist)
}

// listening reports whether something accepts connections on the socket:
// a plain connect, which sends nothing.
func (c *Client) listening() bool {
	nc, err := net.DialTimeout("unix", c.sock, 2*time.Second)
	if err != nil {
		return false
	}
	nc.Close()
	return true
}

// connect opens a connection and does the handshake. A daemon still
// taking shells over accepts only once it serves: the Welcome may take
// that long, bounded by spawnWait.
func (c *Client) connect(ctx context.Context) (*wire.Conn, error) {
	deadline := time.Now().Add(spawnWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	var nc net.Conn
	var err error
	if c.addr != "" {
		nc, err = c.dialTLS(ctx, deadline)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "unix", c.sock)
	}
	if err != nil {
		return nil, err
	}
	wc := wire.NewConn(nc)
	nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	fail := func(err error) (*wire.Conn, error) {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("the daemon at %s did not answer within %v", c.target(), spawnWait)
		}
		if c.addr != "" {
			return nil, c.tlsErr(err)
		}
		return nil, err
	}
	if err := wc.WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{1, wire.Version}}); err != nil {
		return fail(err)
	}
	typ, b, err := wc.ReadFrame(wire.MaxControl)
	if err != nil {
		return fail(err)
	}
	switch typ {
	case wire.FrameWelcome:
		var w wire.Welcome
		if err := wire.Decode(b, &w); err != nil {
			return fail(err)
		}
		c.pid.Store(int64(w.Pid))
		wc.Version = w.Version
	case wire.FrameError:
		return fail(decodeError(b))
	default:
		return fail(fmt.Errorf("the daemon answered the handshake with a %q frame", typ))
	}
	nc.SetDeadline(time.Time{})
	return wc, nil
}

// decodeError is the error of an Error frame.
func decodeError(b []byte) error {
	var e wire.Error
	if err := wire.Decode(b, &e); err != nil {
		return err
	}
	return &e
}

// get returns a connection for one call: an idle one (reused says so),
// or a new one.
func (c *Client) get(ctx context.Context) (wc *wire.Conn, reused bool, err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, errors.New("client closed")
	}
	for len(c.idle) > 0 {
		ic := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if time.Since(ic.since) < maxIdleAge {
			c.mu.Unlock()
			return ic.wc, true, nil
		}
		ic.wc.Net().Close()
	}
	c.mu.Unlock()
	wc, err = c.connect(ctx)
	if err != nil && (notListening(err) || errors.Is(err, ErrNoDaemon) || connBroke(err)) {
		return nil, false, &lostError{err}
	}
	return wc, false, err
}

// connBroke reports whether err says the daemon closed or reset the
// connection (a stopping daemon drops the connections it has not
// answered): the daemon was lost, not a failure of its own kind.
func connBroke(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// send gets a connection and sends a call's frame on it. A reused
// connection that the daemon closed meanwhile (an earlier daemon's, or
// one idle for too long) fails the write with nothing sent: then a new
// connection is tried, once.
func (c *Client) send(ctx context.Context, call wire.Call) (*wire.Conn, error) {
	for {
		wc, reused, err := c.get(ctx)
		if err != nil {
			return nil, err
		}
		if call.Exec != nil && call.Exec.HasBytes() && wc.Version < wire.VersionBytes {
			// It would ignore the _bytes fields and run the text changed.
			c.put(wc)
			return nil, fmt.Errorf("%w: the command, its environment or its working directory holds bytes that are not UTF-8, "+
				"and the daemon (pid %d) speaks protocol %d, which cannot carry them: restart it with this corral "+
				"(corral daemon stop; its sessions keep running)", ErrBadRequest, c.DaemonPid(), wc.Version)
		}
		err = wc.WriteJSON(wire.FrameCall, call)
		if err == nil {
			return wc, nil
		}
		wc.Net().Close()
		if errors.Is(err, wire.ErrFrameTooLarge) {
			return nil, fmt.Errorf("%w: the %s call is %v", ErrBadRequest, call.Call, err)
		}
		if !reused {
			return nil, c.broken(ctx, err)
		}
	}
}

// put gives back a connection whose call ended cleanly.
func (c *Client) put(wc *wire.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle) >= maxIdle {
		wc.Net().Close()
		return
	}
	c.idle = append(c.idle, idleConn{wc, time.Now()})
}

// Close closes the client's connections. A call under way goes on until
// it ends.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, ic := range c.idle {
		ic.wc.Net().Close()
	}
	c.idle = nil
	return nil
}

// DaemonPid is the pid of the daemon as it said at the handshake.
func (c *Client) DaemonPid() int { return int(c.pid.Load()) }

// call makes one call that ends with a reply decoded into out.
func (c *Client) call(ctx context.Context, call wire.Call, out any) error {
	wc, err := c.send(ctx, call)
	if err != nil {
		return err
	}
	nc := wc.Net()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	clean := false
	defer func() {
		if stop() && clean {
			nc.SetDeadline(time.Time{})
			c.put(wc)
		} else {
			nc.Close()
		}
	}()
	typ, b, err := wc.ReadFrame(wire.MaxReply)
	if err != nil {
		return c.broken(ctx, err)
	}
	switch typ {
	case wire.FrameReply:
		clean = true
		return wire.Decode(b, out)
	case wire.FrameError:
		clean = true
		return decodeError(b)
	}
	return fmt.Errorf("the daemon answered a %s call with a %q frame", call.Call, typ)
}

// broken is the error of a connection that failed during a call.
func (c *Client) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return &lostError{err}
}

// Session describes one session as the daemon lists it.
type Session struct {
	Name string
	// State is up, down, broken or recovering.
	State, Shell, Cwd string
	Created, LastUsed time.Time
	// ShellPid is the pid of the session's shell, which holds the
	// session (0 when it is down).
	ShellPid int
	// Busy says a command is running; Reason says why a session is
	// broken or still being recovered.
	Busy   bool
	Reason string
	// Limits are the session's resource limits (zero: none).
	Limits corral.Limits
	// MemoryBytes and Pids are what its live shell tree holds now
	// (memory.current, pids.current), nil when not measured; Accounting
	// says why, for a live shell.
	MemoryBytes, Pids *int64
	Accounting        string
	// Kind is exec or terminal; Term describes a terminal session (nil
	// for an exec session).
	Kind string
	Term *TermInfo
	// BackgroundBytes counts the background output the session keeps
	// (ExecOptions.BackgroundOutput takes it).
	BackgroundBytes int64
}

// List lists the sessions.
func (c *Client) List(ctx context.Context) ([]Session, error) {
	var resp wire.Sessions
	if err := c.call(ctx, wire.Call{Call: wire.CallList}, &resp); err != nil {
		return nil, err
	}
	out := make([]Session, 0, len(resp.Sessions))
	for _, s := range resp.Sessions {
		out = append(out, Session{Name: s.Name, State: s.State, Shell: s.Shell, Cwd: s.CwdText(),
			Created: time.Unix(s.CreatedUnix, 0), LastUsed: time.Unix(s.LastUsedUnix, 0), ShellPid: s.ShellPid,
			Busy: s.Busy, Reason: s.Reason, Limits: s.Limits.Corral(), MemoryBytes: s.MemoryBytes, Pids: s.Pids, Accounting: s.Accounting,
			Kind: kindOf(s.Kind), Term: termInfo(s.Term), BackgroundBytes: s.BackgroundBytes})
	}
	return out, nil
}

// Kill ends the named sessions (all of them with all set) and returns
// those it ended.
func (c *Client) Kill(ctx context.Context, all bool, names ...string) ([]string, error) {
	var resp wire.Killed
	if err := c.call(ctx, wire.Call{Call: wire.CallKill, Kill: &wire.Kill{Names: names, All: all}}, &resp); err != nil {
		return nil, fmt.Errorf("kill: %w", err)
	}
	return resp.Killed, nil
}

// Status describes a daemon.
type Status struct {
	Pid      int
	Socket   string
	StateDir string
	Sessions int
	Started  time.Time
	// Isolation is how the daemon contains the shells of the sessions it
	// creates and its oneshots.
	Isolation string
}

// Status asks the daemon how it is.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st wire.Status
	if err := c.call(ctx, wire.Call{Call: wire.CallStatus}, &st); err != nil {
		return Status{}, err
	}
	return Status{Pid: st.Pid, Socket: st.Socket, StateDir: st.StateDir, Sessions: st.Sessions,
		Started: time.Unix(st.StartedUnix, 0), Isolation: st.Isolation}, nil
}

// Stop asks the daemon to stop; it answers first. Every session's shell
// keeps running, for the next daemon to take over.
func (c *Client) Stop(ctx context.Context) error {
	var none struct{}
	return c.call(ctx, wire.Call{Call: wire.CallStop}, &none)
}

// ExecOptions are the settings of one command.
type ExecOptions struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Timeout        time.Duration
	MaxOutput      int64
	// Oneshot runs the command in a fresh contained shell.
	Oneshot bool
	// BackgroundOutput runs nothing: the session's kept background
	// output (what its background jobs wrote after their command had
	// ended) is written to Stdout and Stderr, and forgotten.
	BackgroundOutput bool
	// Dir and Env are a new session's initial directory and environment
	// (and a oneshot command's); "" and nil mean this process's. For a
	// remote daemon (TLS) they mean the daemon's home and environment
	// instead, Env's variables are set over the daemon's environment, and
	// Dir and Cwd must be absolute paths of the daemon's machine.
	Dir string
	Env []string
	// Cwd, if set, is entered before the command (made absolute here): in
	// a session the cd persists, and a new session or a oneshot starts
	// there. A Cwd that cannot be entered fails the command before it
	// starts (outcome start_failed, the reason in Result.Error).
	Cwd string
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
	// Limits are the resource limits of the session this command creates
	// (or of a oneshot's tree); for an existing session they change its
	// limits in place before the command runs: a positive field sets a
	// limit, a negative one removes it, zero leaves it. Limits the
	// session's isolation cannot enforce end the command start_failed,
	// with nothing created or changed.
	Limits corral.Limits
	// DetachOnDisconnect keeps the command going if this client goes
	// away (or its connection is lost), its output kept by the daemon
	// under a job id, given to OnJob before any output: Resume continues
	// it (resume.go).
	DetachOnDisconnect bool
	OnJob              func(job string)
}

func (o *ExecOptions) interruptSignal() syscall.Signal {
	if o.InterruptSignal == nil {
		return 0
	}
	return o.InterruptSignal()
}

// Result is a command's result, with what the session says after it.
type Result struct {
	corral.Result
	// Cwd is the session's working directory after the command ("" for a
	// oneshot, or a session whose shell is gone).
	Cwd string
	// Limits are the session's resource limits after the command (zero:
	// none); LimitsChanged says this command changed them.
	Limits        corral.Limits
	LimitsChanged bool
}

// request builds the wire request of one command, once.
func request(name, code string, o *ExecOptions, remote bool) (*wire.Exec, error) {
	e := &wire.Exec{Session: name, Command: code, Oneshot: o.Oneshot, Dir: o.Dir, Env: o.Env, Stdin: o.Stdin != nil, BackgroundOutput: o.BackgroundOutput,
		Merge:     corral.SameWriter(o.Stdout, o.Stderr),
		TimeoutMs: o.Timeout.Milliseconds(), MaxOutput: o.MaxOutput, GraceMs: o.Grace.Milliseconds(), StopSignal: int(o.StopSignal),
		Limits: wire.Limits{MemoryMax: o.Limits.MemoryMax, MemoryHigh: o.Limits.MemoryHigh, CPUs: o.Limits.CPUs, PidsMax: o.Limits.PidsMax}}
	switch {
	case remote && o.Cwd != "" && !filepath.IsAbs(o.Cwd):
		return nil, fmt.Errorf("%w: cwd %s: a remote daemon needs an absolute path (of its machine)", ErrBadRequest, o.Cwd)
	case remote && o.Dir != "" && !filepath.IsAbs(o.Dir):
		return nil, fmt.Errorf("%w: dir %s: a remote daemon needs an absolute path (of its machine)", ErrBadRequest, o.Dir)
	case remote:
		// Nothing of this machine: the daemon starts from its own home
		// and environment, plus what the caller gave explicitly.
		if o.Cwd != "" {
			e.Cwd, e.Dir = o.Cwd, o.Cwd
		}
	case e.Env == nil:
		e.Env = os.Environ()
	}
	if o.Cwd != "" && !remote {
		abs, err := filepath.Abs(o.Cwd)
		if err != nil {
			return nil, fmt.Errorf("%w: cwd %s: %v", ErrBadRequest, o.Cwd, err)
		}
		e.Cwd, e.Dir = abs, abs
	}
	if e.Dir == "" && !remote {
		e.Dir, _ = os.Getwd()
	}
	if !remote {
		e.Umask = processUmask() // a new session's, as its Dir and Env
	}
	if o.Grace < 0 {
		e.GraceMs = -1
	}
	if !utf8.ValidString(e.Session) {
		return nil, fmt.Errorf("%w: the session name %q is not UTF-8 (want [A-Za-z0-9][A-Za-z0-9._-]{0,63})", ErrBadRequest, e.Session)
	}
	// Command, paths and environment are bytes: what is not UTF-8 goes in
	// the _bytes fields, exactly (JSON text would have it replaced).
	e.EncodeBytes()
	return e, nil
}

// Exec runs code in session name (created on first use; "" with
// o.Oneshot) and returns its result. Cancelling ctx cancels the command
// (and resets the session) without waiting for it; o.Interrupt and o.Kill
// stop it and wait.
//
// The error is nil only if the command exited 0 and its state was
// recorded; otherwise, with a result, it is a *corral.RunError, or a
// *StateNotSavedError, or both (errors.Join). Without a result, the
// command did not run (or this client lost the daemon: ErrLost).
func (c *Client) Exec(ctx context.Context, name, code string, o ExecOptions) (*Result, error) {
	e, err := request(name, code, &o, c.addr != "")
	if err != nil {
		return nil, err
	}
	e.Detach = o.DetachOnDisconnect
	wc, err := c.send(ctx, wire.Call{Call: wire.CallExec, Exec: e})
	if err != nil {
		return nil, err
	}
	return c.stream(ctx, wc, "an exec call", &o, o.Stdin, true)
}

// startDaemon starts a daemon for dir unless one is listening by the time
// this client holds the spawn lock (another client started it), and waits
// until it listens.
func startDaemon(ctx context.Context, dir, corralPath string, listening func() bool) error {
	unlock, err := lockSpawn(dir)
	if err != nil {
		return fmt.Errorf("starting the daemon: spawn lock: %w", err)
	}
	defer unlock()
	if listening() {
		return nil
	}
	if err := spawnDaemon(dir, corralPath); err != nil {
		return fmt.Errorf("starting the daemon: %w", err)
	}
	for deadline := time.Now().Add(spawnWait); !listening(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the daemon did not start; see %s", filepath.Join(dir, "daemon.log"))
		}
	}
	return nil
}

// spawnDaemon starts "corral daemon" in a session of its own, detached from
// this process and its terminal.
func spawnDaemon(dir, corralPath string) error {
	if corralPath == "" {
		corralPath = "corral"
	}
	exe, err := exec.LookPath(corralPath)
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The daemon outlives this client: it must not keep the client's
	// descriptors (a caller's pipe would get no EOF while it lives). The
	// daemon marks what it inherits too; this spares it holding them.
	fds.CloseOnExecFrom(3)
	cmd := exec.Command(exe, "daemon")
	cmd.Dir = "/" // nor pin the client's working directory
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), statedir.Env+"="+dir)
	cmd.SysProcAttr = detached()
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}

// StateDir is the state directory the client dialled ("" if it dialled a
// socket).
func (c *Client) StateDir() string { return c.stateDir }
