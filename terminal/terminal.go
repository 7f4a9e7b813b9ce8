// Package terminal runs programs on a PTY in terminal sessions that
// outlive the process that opened them: editors, REPLs, top, a dev server
// with a TUI, another agent. Each session is held by its own small
// process, the holder (corral holder), which owns the PTY, a screen model
// with a scrollback budgeted in bytes, and the program, run as a
// contained corral tree recorded before it runs. The holder serves the
// session on a unix socket in the session's directory; any process of the
// same user can Dial it again, after the opener is gone.
//
// Open starts a session; Dial reconnects to one. A Term then offers what
// an agent needs without a terminal (Send, Screen, Wait, Resize) and what
// a person needs with one (Attach: a redraw of the current screen, then
// the live output; detaching resets the modes the program set in the
// client's terminal).
package terminal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/holder"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/term"
	"github.com/corral-dev/corral/internal/unixsock"
)

// Types of the holder's protocol, as the library's callers see them.
type (
	// Screen is a session's current screen, with its cursor, title,
	// alternate-screen flag and the program's status.
	Screen = holder.Screen
	// Status is the state of a session's program: its tree and, once it
	// has exited, how.
	Status = holder.Status
)

// Errors.
var (
	// ErrUnsupported means this platform cannot hold terminal sessions.
	ErrUnsupported = term.ErrUnsupported
	// ErrGone means no holder answers in the session's directory: the
	// session was closed, or its holder died.
	ErrGone = errors.New("terminal session is gone")
	// ErrHolder means the holder refused a request or failed; the
	// message says why.
	ErrHolder = errors.New("terminal session")
)

// Config describes the program of a new session.
type Config struct {
	// Path is the program (looked up in PATH if it has no slash); Args
	// its command line, Args[0] included (nil: Path alone).
	Path string
	Args []string
	// Env is the program's environment (nil: this process's). Give it a
	// TERM matching what the clients' terminals understand: the screen
	// model speaks xterm; nil Env with no TERM set gets
	// TERM=xterm-256color.
	Env []string
	// Dir is the program's working directory ("": this process's).
	Dir string
	// Cols and Rows are the window's size (0: 80×24).
	Cols, Rows int
	// ScrollbackBytes bounds the scrollback kept by the holder, in bytes
	// of content (0: 8 MiB; negative: none).
	ScrollbackBytes int
	// Isolation contains the program ("": the best available).
	Isolation corral.Isolation
	// Grace is how long Close lets the program end after SIGTERM before
	// SIGKILL (0: corral.DefaultGrace).
	Grace time.Duration

	// Holder is the command line that runs the holder (nil: this
	// executable with the argument "holder", which a program that
	// embeds this package must dispatch to holder.Main, as corral does).
	Holder []string
	// HolderEnv is the holder's environment (nil: this process's).
	HolderEnv []string
	// HolderIsolation contains the holder's own tree, which holds the
	// program's ("": the best available).
	HolderIsolation corral.Isolation
	// OnHolderStart, if set, is given the holder's tree identity before
	// the holder runs its first instruction, to record it durably (as
	// corral.Cmd.OnStart); an error kills the holder unrun and fails
	// Open.
	OnHolderStart func(corral.Identity) error
}

// Term is a handle on a terminal session. Its methods may be called from
// any goroutine; each opens its own connection to the holder.
type Term struct {
	dir  string
	sock string
	// tree is the holder's tree, when this Term started it: Close
	// waits for it.
	tree    *corral.Tree
	pid     int
	program *corral.Identity // the program's tree, as the holder said at its start
}

// startBound bounds how long Open waits for the holder to serve.
const startBound = 30 * time.Second

// Open starts a terminal session in dir (created private if it is
// missing, refused if it is not ours alone, as the state directory is):
// it starts the holder in a session of its own and returns once the
// holder serves and the program has started. The session lives until
// Close, whatever happens to this process. The Term returned owns the
// holder's exit status: call Close (or Release, to leave the session
// running) once done with it.
func Open(ctx context.Context, dir string, cfg Config) (*Term, error) {
	if !supported {
		return nil, fmt.Errorf("open terminal session: %w", ErrUnsupported)
	}
	if cfg.Path == "" {
		return nil, fmt.Errorf("open terminal session: %w: no program given", ErrHolder)
	}
	if cfg.Cols == 0 && cfg.Rows == 0 {
		cfg.Cols, cfg.Rows = 80, 24
	}
	if err := term.CheckSize(cfg.Cols, cfg.Rows); err != nil {
		return nil, fmt.Errorf("open terminal session: %w", err)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := statedir.Ensure(filepath.Dir(dir), filepath.Base(dir)); err != nil {
		return nil, fmt.Errorf("open terminal session: %w", err)
	}
	sock := filepath.Join(dir, holder.SocketName)
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("open terminal session in %s: a holder already serves there (Dial it, or Close it first)", dir)
	}
	args := cfg.Args
	if len(args) == 0 {
		args = []string{cfg.Path}
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
		if os.Getenv("TERM") == "" {
			env = append(env, "TERM=xterm-256color")
		}
	}
	spec := holder.Spec{Dir: dir, Path: cfg.Path, Args: args, Env: env, Cwd: cfg.Dir,
		Cols: cfg.Cols, Rows: cfg.Rows, ScrollbackBytes: cfg.ScrollbackBytes,
		Isolation: cfg.Isolation, Grace: cfg.Grace}
	argv := cfg.Holder
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("open terminal session: find the holder: %w", err)
		}
		argv = []string{exe, "holder"}
	}
	if strings.ContainsRune(argv[0], filepath.Separator) && !filepath.IsAbs(argv[0]) {
		// The holder runs in /: a relative path is ours, not its.
		abs, err := filepath.Abs(argv[0])
		if err != nil {
			return nil, fmt.Errorf("open terminal session: the holder %s: %w", argv[0], err)
		}
		argv = append([]string{abs}, argv[1:]...)
	}
	log, err := os.OpenFile(filepath.Join(dir, "holder.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|oNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open terminal session: %w", err)
	}
	defer log.Close()
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// The holder is a contained tree like any other: it leads a new
	// session (so that the PTY can become its controlling terminal and
	// no hangup of ours reaches it), and its identity can be recorded
	// (OnHolderStart) before it runs its first instruction.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer outR.Close()
	holderEnv := cfg.HolderEnv
	if holderEnv == nil {
		holderEnv = os.Environ()
	}
	cmd := &corral.Cmd{
		Path: argv[0], Args: argv, Env: holderEnv, Dir: "/",
		Stdin: bytes.NewReader(specJSON), StdoutFile: outW, StderrFile: log,
		Setsid: true, Isolation: cfg.HolderIsolation, Grace: cfg.Grace,
		OnStart: cfg.OnHolderStart,
	}
	tree, err := cmd.Start(context.Background())
	outW.Close()
	if err != nil {
		return nil, fmt.Errorf("open terminal session: start the holder %s: %w", argv[0], err)
	}
	type result struct {
		r   holder.Ready
		err error
	}
	got := make(chan result, 1)
	go func() {
		var r holder.Ready
		err := json.NewDecoder(bufio.NewReader(outR)).Decode(&r)
		got <- result{r, err}
	}()
	var res result
	received := false
	select {
	case res = <-got:
		received = true
	case <-ctx.Done():
		res.err = context.Cause(ctx)
	case <-time.After(startBound):
		res.err = fmt.Errorf("the holder did not answer within %v", startBound)
	}
	if res.err == nil && res.r.Error != "" {
		res.err = fmt.Errorf("%w: %s", ErrHolder, res.r.Error)
	}
	if res.err != nil {
		tree.Stop(-1)
		tree.Wait()
		outR.Close() // ends the decoder if it still reads
		if !received {
			<-got
		}
		return nil, fmt.Errorf("open terminal session in %s: %w (see %s)", dir, res.err, filepath.Join(dir, "holder.log"))
	}
	return &Term{dir: dir, sock: sock, tree: tree, pid: res.r.Pid, program: res.r.Tree}, nil
}

// Dial returns a handle on the session served in dir, checking that the
// directory is ours alone and that a holder answers there.
func Dial(ctx context.Context, dir string) (*Term, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := statedir.Check(dir); err != nil {
		return nil, fmt.Errorf("dial terminal session: %w", err)
	}
	t := &Term{dir: dir, sock: filepath.Join(dir, holder.SocketName)}
	st, err := t.Status(ctx)
	if err != nil {
		return nil, err
	}
	t.pid = st.HolderPid
	return t, nil
}

// Dir is the session's directory.
func (t *Term) Dir() string { return t.dir }

// HolderPid is the holder's pid.
func (t *Term) HolderPid() int { return t.pid }

// dial opens a connection and sends req.
// The socket must be a socket, not a link to someone else's (connect
// follows links), and the process serving it must be of this user.
func (t *Term) dial(ctx context.Context, req holder.Request) (net.Conn, *bufio.Reader, error) {
	if fi, err := os.Lstat(t.sock); err == nil && fi.Mode().Type() != os.ModeSocket {
		return nil, nil, fmt.Errorf("terminal session %s: %w: %s is a %v, not the holder's socket (something replaced it: corral kill the session, or remove it by hand)",
			t.dir, ErrHolder, t.sock, fi.Mode().Type())
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", t.sock)
	if err != nil {
		return nil, nil, fmt.Errorf("terminal session %s: %w: %w", t.dir, ErrGone, err)
	}
	if uid, err := unixsock.PeerUID(conn); err == nil && uid != os.Geteuid() {
		conn.Close()
		return nil, nil, fmt.Errorf("terminal session %s: %w: the process serving %s runs as uid %d, not as this user", t.dir, ErrHolder, t.sock, uid)
	}
	if err := holder.WriteJSON(conn, holder.FrameRequest, req); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("terminal session %s: %w: %w", t.dir, ErrGone, err)
	}
	return conn, bufio.NewReader(conn), nil
}

// call makes one request and returns the answer; ctx ending closes the
// connection (the holder then drops the request).
func (t *Term) call(ctx context.Context, req holder.Request) (*holder.Answer, error) {
	conn, r, err := t.dial(ctx, req)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	a, err := readAnswer(r)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("terminal session %s: %s: %w", t.dir, req.Op, err)
	}
	if a.Error != "" {
		return a, fmt.Errorf("terminal session %s: %s: %w: %s", t.dir, req.Op, ErrHolder, a.Error)
	}
	return a, nil
}

func readAnswer(r *bufio.Reader) (*holder.Answer, error) {
	typ, p, err := holder.ReadJSON(r)
	if err != nil {
		return nil, fmt.Errorf("%w: no answer: %w", ErrGone, err)
	}
	if typ != holder.FrameAnswer {
		return nil, fmt.Errorf("%w: the holder answered with frame %q", ErrHolder, typ)
	}
	var a holder.Answer
	if err := json.Unmarshal(p, &a); err != nil {
		return nil, fmt.Errorf("%w: bad answer: %w", ErrHolder, err)
	}
	return &a, nil
}

// Send writes b to the program as typed input; it returns once the holder
// has written it to the PTY.
//
// Input larger than one request can carry (a frame's payload bounds the
// request, and JSON grows bytes by a third) is sent as several requests,
// in order; another client's input may come between two of them.
func (t *Term) Send(ctx context.Context, b []byte) error {
	for {
		n := min(len(b), maxSendChunk)
		if _, err := t.call(ctx, holder.Request{Op: "send", Data: b[:n]}); err != nil {
			return err
		}
		if b = b[n:]; len(b) == 0 {
			return nil
		}
	}
}

// maxSendChunk is the most input one send request carries: its base64
// in JSON stays well inside holder.MaxFrame.
const maxSendChunk = holder.MaxFrame / 2

// ScreenOptions says what Screen returns besides the visible screen.
type ScreenOptions struct {
	// ANSI gives the text with its attributes as SGR sequences.
	ANSI bool
	// Scrollback is how many of the newest scrollback rows to include
	// (-1: all).
	Scrollback int
}

// Screen returns the current screen.
func (t *Term) Screen(ctx context.Context, o ScreenOptions) (*Screen, error) {
	a, err := t.call(ctx, holder.Request{Op: "screen", ANSI: o.ANSI, Scrollback: o.Scrollback})
	if err != nil {
		return nil, err
	}
	return a.Screen, nil
}

// WaitOptions says what Wait waits for: the first of the screen matching
// Text (a regular expression, multi-line: ^ and $ match at each row),
// output quiet for Idle, or the program's exit (Exit). Timeout bounds it
// (0: only ctx does).
type WaitOptions struct {
	Text    string
	Idle    time.Duration
	Exit    bool
	Timeout time.Duration
}

// WaitResult says why Wait returned.
type WaitResult struct {
	// Reason is "text", "idle", "exit" or "timeout".
	Reason string
	// Match is the text that matched, for "text".
	Match  string
	Status Status
}

// Wait waits as o says. A timeout is not an error: Reason says
// "timeout".
func (t *Term) Wait(ctx context.Context, o WaitOptions) (*WaitResult, error) {
	a, err := t.call(ctx, holder.Request{Op: "wait", Wait: holder.WaitSpec{Text: o.Text, Idle: o.Idle, Exit: o.Exit, Timeout: o.Timeout}})
	if err != nil {
		return nil, err
	}
	r := &WaitResult{Reason: a.Reason, Match: a.Match}
	if a.Status != nil {
		r.Status = *a.Status
	}
	return r, nil
}

// Resize sets the window's size; the program gets SIGWINCH.
func (t *Term) Resize(ctx context.Context, cols, rows int) error {
	if err := term.CheckSize(cols, rows); err != nil {
		return err
	}
	_, err := t.call(ctx, holder.Request{Op: "resize", Size: holder.Size{Cols: cols, Rows: rows}})
	return err
}

// Status returns the program's status.
func (t *Term) Status(ctx context.Context) (*Status, error) {
	a, err := t.call(ctx, holder.Request{Op: "status"})
	if err != nil {
		return nil, err
	}
	return a.Status, nil
}

// Close ends the session: the program's tree is stopped (SIGTERM, grace,
// SIGKILL) if it still runs, the holder answers with its final status and
// exits. If this Term started the holder, Close also waits until the
// holder's whole tree is gone (stopping it through its tree if the holder
// does not answer).
func (t *Term) Close(ctx context.Context) (*Status, error) {
	a, err := t.call(ctx, holder.Request{Op: "close"})
	if tree := t.tree; tree != nil {
		t.tree = nil
		if err != nil {
			// The holder did not answer: stop its tree ourselves.
			tree.Stop(0)
		}
		tree.Wait()
	}
	if err != nil {
		return nil, err
	}
	return a.Status, nil
}

// Release gives up this Term's ownership of the holder's tree without
// closing the session (a goroutine waits for the tree, and settles it
// when the holder exits). Call it instead of Close to leave the session
// running.
func (t *Term) Release() {
	if tree := t.tree; tree != nil {
		t.tree = nil
		go tree.Wait()
	}
}

// HolderTree is the holder's tree when this Term started it (nil for a
// Term from Dial, or once Close or Release ran): an owner that keeps the
// session after Open may stop it, wait for it, or let it go
// (corral.Tree.Release) when it exits itself. Whoever takes it calls
// its Wait; Close and Release then leave it alone.
func (t *Term) HolderTree() *corral.Tree {
	tree := t.tree
	t.tree = nil
	return tree
}

// Program is the program's tree identity as the holder reported it when
// this Term started it (nil for a Term from Dial: see Status).
func (t *Term) Program() *corral.Identity { return t.program }
