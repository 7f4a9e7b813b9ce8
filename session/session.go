package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-dev/corral"
)

// Config describes a session's shell.
type Config struct {
	// Shell is the shell to run; "" means the user's login shell ($SHELL)
	// if it is bash, zsh, dash, ksh or sh, else /bin/sh.
	Shell string
	// Dir is the initial working directory; "" means this process's.
	Dir string
	// Env is the initial environment; nil means this process's.
	Env []string
	// Isolation selects the containment of the session tree.
	Isolation corral.Isolation
	// Grace is the time between SIGTERM and SIGKILL when the session is
	// reset or closed; 0 means corral.DefaultGrace, negative kills at once.
	Grace time.Duration
	// Drain bounds how long output is read after a command has completed
	// (its markers) or its shell has died; 0 means corral.DefaultDrain.
	Drain time.Duration
	// TrackEnv makes every command also report the shell's exported
	// environment, so that State has it as of the last completed command
	// (costs a few tens of microseconds per command).
	TrackEnv bool
	// HoldDir, if set, makes the session's shell independent of this
	// process: its command channel, stdout and stderr are named pipes
	// (FIFOs) in this directory, which the shell itself holds open for
	// reading and writing, so that it neither reads end of file nor gets
	// SIGPIPE when this process dies. Another process can then take the
	// shell over with Attach. The directory must exist and be private
	// (0700); stdin FIFOs go there too.
	HoldDir string
	// RestoreOnReset makes the fresh shell that follows a reset (a
	// cancelled command, a shell that exited) start in the working
	// directory and exported environment as of the last completed command
	// (the environment as far as TrackEnv or Snapshot knows it), instead
	// of Dir and Env.
	RestoreOnReset bool
	// OnStart, if set, is called with the identity of each new shell's
	// tree while the shell is held before its first instruction (to record
	// it durably, as corral.Cmd.OnStart). If it fails, the shell is killed
	// and the command that needed it fails to start.
	OnStart func(corral.Identity) error
	// Limits are the resource limits of the session's tree (the shell
	// and everything it starts), written into each new shell's cgroup
	// before the shell runs, as corral.Cmd's (so a shell started after a
	// reset has them too); SetLimits changes them. They need cgroup
	// isolation with the controllers delegated: where that is missing
	// the shell does not start (corral.ErrIsolation).
	Limits corral.Limits
	// Umask, if not nil, is the umask every shell of the session starts
	// with (after a reset too; a command's own umask lasts as long as
	// its shell), as Dir and Env are its start: a daemon gives the
	// creating client's. nil: this process's. At most 0777.
	Umask *uint32

	// bg is the session's kept background output, shared by the copies
	// of this Config that its shells get.
	bg *background
	// fifoDir is the session's directory of FIFOs (HoldDir, or a private
	// one of its own), set by New.
	fifoDir string

	// OnHeld is OnStart for a held shell (HoldDir set), with the
	// identities of the FIFOs made for it: record them with the shell's
	// identity and give them back to Attach (in State.Fifos), which then
	// refuses any other FIFOs. If set, it is called instead of OnStart.
	OnHeld func(corral.Identity, Fifos) error
}

// TakeoverBound is how long Attach lets a taken-over shell finish what it
// was running before it cancels that command.
const TakeoverBound = time.Second

// Options are the settings of one command.
type Options struct {
	// Stdin is the command's input; nil means end of file at once. If a
	// Read of it blocks past the command's end, Exec returns without
	// waiting for it (as os/exec does without WaitDelay) and nothing
	// more is read once it returns; otherwise Exec is done with Stdin
	// when it returns.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it is produced; nil discards.
	Stdout io.Writer
	Stderr io.Writer
	// Timeout bounds the command (0: none; ctx may also have a deadline).
	Timeout time.Duration
	// MaxOutput limits stdout+stderr in bytes (0: none).
	MaxOutput int64
	// Escalate, if set, skips the rest of the grace period of a command
	// that ctx (or Timeout) stopped when closed: its tree is killed at
	// once, as corral.Cmd.Escalate.
	Escalate <-chan struct{}
	// Grace, if not 0, replaces the session's grace period for this
	// command when a timeout or cancel stops it (negative: SIGKILL at
	// once). StopSignal, if set, is the first signal sent then instead of
	// SIGTERM (Unix).
	Grace      time.Duration
	StopSignal os.Signal

	snapshot bool // internal: report the environment, count no command
}

// State is what a session knows about its shell without running anything.
type State struct {
	// Cwd is the shell's working directory after the last completed
	// command (its $PWD).
	Cwd string
	// Env is the shell's exported environment as of the last command run
	// with Config.TrackEnv set, or the last Snapshot; until then, the
	// environment the shell started with.
	Env []string
	// Busy reports whether a command is running now.
	Busy bool
	// Alive reports whether a shell is running (false before the first
	// command, after a reset and after Close).
	Alive bool
	// Pid is the shell's pid, 0 if none.
	Pid int
	// Commands counts the commands run so far.
	Commands uint64
	// Resets counts the shells that were discarded.
	Resets uint64
	// Fifos identifies a held shell's FIFOs (zero if none). Attach checks
	// the FIFOs it takes over against last.Fifos.
	Fifos Fifos
	// BackgroundBytes counts the bytes of background output kept now
	// (see TakeBackground).
	BackgroundBytes int64
}

// Session is one long-lived shell. Its methods are safe for concurrent use;
// commands run one at a time, in the order Exec was called.
type Session struct {
	cfg  Config
	turn queue
	dir  string // private directory for stdin FIFOs, 0700

	// mu guards the fields that follow; it is never held while a command
	// runs, so State and Closed never wait for one.
	mu     sync.Mutex
	sh     *shell
	closed bool
	busy   bool
	state  State
	note   string // what the last start of a shell had to change, for the next result
}

// New prepares a session. The shell is started by the first command (or by
// Start).
func New(cfg Config) (*Session, error) {
	if cfg.Shell == "" {
		cfg.Shell = defaultShell()
	}
	if _, err := lookShell(cfg.Shell); err != nil {
		return nil, err
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("session: working directory: %w", err)
		}
		cfg.Dir = wd
	}
	cfg.bg = &background{}
	if cfg.Umask != nil && *cfg.Umask > 0o777 {
		return nil, fmt.Errorf("session: umask %#o is not a umask (want 0 to 0777)", *cfg.Umask)
	}
	if cfg.Grace == 0 {
		cfg.Grace = corral.DefaultGrace
	}
	if cfg.Drain <= 0 {
		cfg.Drain = corral.DefaultDrain
	}
	dir := cfg.HoldDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "corral-session-"); err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
	}
	cfg.fifoDir = dir
	s := &Session{cfg: cfg, dir: dir}
	s.state = State{Cwd: cfg.Dir, Env: withoutStartupHooks(cfg.Env)}
	return s, nil
}

// defaultShell is the login shell if it understands POSIX sh, else /bin/sh.
func defaultShell() string {
	if sh := os.Getenv("SHELL"); sh != "" {
		switch filepath.Base(sh) {
		case "bash", "zsh", "dash", "ksh", "mksh", "sh":
			if _, err := lookShell(sh); err == nil {
				return sh
			}
		}
	}
	return "/bin/sh"
}

// Start starts the shell now, if it is not running, so that the first
// command does not pay for it.
func (s *Session) Start(ctx context.Context) error {
	release, err := s.turn.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	_, err = s.shellForCommand(ctx)
	return err
}

// Exec runs code as shell code in the session's shell and returns its
// result. Output streams to opts.Stdout and opts.Stderr as it arrives.
//
// The error is nil only if the command exited 0; otherwise it is a
// *corral.RunError (errors.Is matches corral.ErrExitStatus, ErrTimeout,
// ErrCancelled, ErrOutputLimit, ...), or ErrClosed, ErrBadCommand,
// ErrSessionUnusable. A command still waiting for its turn when ctx ends
// returns a cancelled or timeout result without having run.
func (s *Session) Exec(ctx context.Context, code string, opts Options) (*corral.Result, error) {
	if strings.IndexByte(code, 0) >= 0 {
		return startFailed(fmt.Errorf("%w: NUL byte in command", ErrBadCommand))
	}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	release, err := s.turn.acquire(ctx)
	if err != nil {
		return corral.NotStarted(ctx, newResult(), "ended while waiting for its turn: nothing ran")
	}
	defer release()
	for attempt := 0; ; attempt++ {
		sh, err := s.shellForCommand(ctx)
		if err != nil {
			return startFailed(err)
		}
		s.setBusy(true)
		res, err := sh.exec(ctx, code, opts, s.dir)
		s.setBusy(false)
		if note := s.takeNote(); note != "" {
			res.Error = joinErr(note, res.Error)
		}
		s.afterCommand(sh, res, false)
		if err == errUnusable {
			s.discard(sh)
			if attempt == 0 {
				continue // the command did not run: once more on a fresh shell
			}
			return res, fmt.Errorf("session: %w", ErrSessionUnusable)
		}
		if sh.isDead() {
			s.discard(sh)
		}
		return res, err
	}
}

// shellForCommand returns the running shell, starting one if there is none.
// Only the holder of the turn calls it.
func (s *Session) shellForCommand(ctx context.Context) (*shell, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	sh := s.sh
	s.mu.Unlock()
	if sh != nil && !sh.isDead() {
		return sh, nil
	}
	if sh != nil {
		s.discard(sh)
	}
	cfg := &s.cfg
	if s.cfg.RestoreOnReset {
		s.mu.Lock()
		restored := s.cfg
		if fi, err := os.Stat(s.state.Cwd); err == nil && fi.IsDir() {
			restored.Dir = s.state.Cwd
		} else if s.state.Cwd != "" && s.state.Cwd != s.cfg.Dir {
			why := "not a directory"
			var pe *os.PathError
			if errors.As(err, &pe) {
				why = pe.Err.Error()
			} else if err != nil {
				why = err.Error()
			}
			s.note = joinErr(s.note, fmt.Sprintf("the session's working directory %s is gone (%s): the fresh shell starts in %s, where the session was created", s.state.Cwd, why, s.cfg.Dir))
		}
		restored.Env = append([]string(nil), s.state.Env...)
		// The last shell's SHLVL already has bash's one added: the
		// fresh shell starts from the first one's.
		restored.Env = append(deleteEnv(restored.Env, "SHLVL"), lookupEnv(withoutStartupHooks(s.cfg.Env), "SHLVL")...)
		s.mu.Unlock()
		cfg = &restored
	}
	s.mu.Lock()
	if cfg == &s.cfg {
		c := s.cfg
		cfg = &c
	}
	cfg.Limits = s.cfg.Limits // SetLimits changes them under mu
	s.mu.Unlock()
	sh, err := startShell(ctx, cfg)
	var note string
	for tries := 0; errors.Is(err, syscall.E2BIG) && tries < maxFitTries; tries++ {
		// An environment execve cannot take (one variable over 128
		// KiB, or all of them over the argument space) would make every
		// later start fail the same way: start with what fits.
		fitted, dropped := fitEnv(cfg.Env)
		if dropped == "" {
			break
		}
		c := *cfg
		c.Env = fitted
		cfg = &c
		note = joinErr(note, dropped)
		sh, err = startShell(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if note != "" {
		s.note = joinErr(s.note, "the environment was too large to start the shell (argument list too long): "+note)
	}
	if s.closed {
		go sh.stop(s.cfg.Grace)
		return nil, ErrClosed
	}
	s.sh = sh
	s.state.Alive = true
	s.state.Pid = sh.pid()
	s.state.Cwd = cfg.Dir
	s.state.Env = withoutStartupHooks(cfg.Env)
	s.state.Fifos = sh.fifos
	return sh, nil
}

// maxFitTries bounds the starts fitEnv may cost.
const maxFitTries = 16

// maxArgStrlen is Linux's bound on one argument or environment string,
// its terminating NUL included (MAX_ARG_STRLEN, 32 pages).
const maxArgStrlen = 32 * 4096

// fitEnv returns env without the entries execve refuses on their own (over
// maxArgStrlen), or, if there are none, without its largest entry; dropped
// names what was left out ("" if nothing could be).
func fitEnv(env []string) (fitted []string, dropped string) {
	var names []string
	drop := func(kv string) {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, fmt.Sprintf("%s (%d bytes)", name, len(kv)))
	}
	for _, kv := range env {
		if len(kv)+1 > maxArgStrlen {
			drop(kv)
			continue
		}
		fitted = append(fitted, kv)
	}
	if len(names) == 0 && len(fitted) > 0 {
		largest := 0
		for i, kv := range fitted {
			if len(kv) > len(fitted[largest]) {
				largest = i
			}
		}
		drop(fitted[largest])
		fitted = append(fitted[:largest:largest], fitted[largest+1:]...)
	}
	if len(names) == 0 {
		return env, ""
	}
	return fitted, "dropped " + strings.Join(names, ", ")
}

// takeNote returns and clears what the last start of a shell had to say.
func (s *Session) takeNote() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.note
	s.note = ""
	return n
}

// discard stops a shell that is dead or must not be used again.
func (s *Session) discard(sh *shell) {
	s.mu.Lock()
	if s.sh == sh {
		s.sh = nil
		s.state.Alive = false
		s.state.Pid = 0
		s.state.Resets++
	}
	s.mu.Unlock()
	sh.stop(s.cfg.Grace)
}

func (s *Session) setBusy(b bool) {
	s.mu.Lock()
	s.busy = b
	s.mu.Unlock()
}

func (s *Session) afterCommand(sh *shell, res *corral.Result, snapshot bool) {
	cwd, env, ok := sh.lastState()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !snapshot && res != nil && res.Outcome != corral.OutcomeStartFailed {
		s.state.Commands++
	}
	if ok && s.sh == sh {
		s.state.Cwd = cwd
		if env != nil {
			s.state.Env = withoutMarker(env)
		}
	}
}

// SetLimits changes the session's resource limits as corral.Tree's
// SetLimits does (a positive field sets a limit, a negative one removes
// it, zero leaves it): in the running shell's tree, in place, and for
// every shell started after it. It waits for its turn like a command. It
// fails with corral.ErrIsolation, changing nothing, where the session's
// isolation cannot enforce the limits. It returns the limits now in
// force.
func (s *Session) SetLimits(ctx context.Context, change corral.Limits) (corral.Limits, error) {
	release, err := s.turn.acquire(ctx)
	if err != nil {
		return s.Limits(), err
	}
	defer release()
	s.mu.Lock()
	sh, closed, cur := s.sh, s.closed, s.cfg.Limits
	s.mu.Unlock()
	if closed {
		return cur, ErrClosed
	}
	next := cur.Apply(change)
	if next == cur {
		return cur, nil
	}
	if sh != nil && !sh.isDead() {
		if err := sh.tree.SetLimits(change); err != nil {
			return cur, fmt.Errorf("session: %w", err)
		}
	} else if err := corral.CheckLimits(s.cfg.Isolation, next); err != nil {
		return cur, fmt.Errorf("session: %w", err)
	}
	s.mu.Lock()
	s.cfg.Limits = next
	s.mu.Unlock()
	return next, nil
}

// EnforceLimits writes the session's limits, exactly, into its running
// shell's tree (a limit the session has not is removed there): for a
// shell taken over with Attach, whose cgroup may have been changed after
// the limits were recorded (an owner that died between the two). It
// waits for its turn like a command, and does nothing without a shell.
func (s *Session) EnforceLimits(ctx context.Context) error {
	release, err := s.turn.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	s.mu.Lock()
	sh, l := s.sh, s.cfg.Limits
	s.mu.Unlock()
	if sh == nil || sh.isDead() || l.IsZero() && sh.tree.Identity().Isolation != corral.IsolationCgroup {
		return nil
	}
	if err := sh.tree.SetLimits(l.Exact()); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	return nil
}

// Limits are the session's resource limits now.
func (s *Session) Limits() corral.Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Limits
}

// Usage is what the session's running shell tree holds now and has used
// since that shell started (see corral.Tree.Usage); ok is false when no
// shell runs. It never waits for a running command.
func (s *Session) Usage() (u corral.Usage, ok bool) {
	s.mu.Lock()
	sh := s.sh
	s.mu.Unlock()
	if sh == nil || sh.isDead() {
		return corral.Usage{}, false
	}
	return sh.tree.Usage(), true
}

// Snapshot refreshes and returns the session's state: it waits for its turn
// like a command (behind a running command), then has the shell report its
// working directory and exported environment. No user code runs. A session
// without a running shell reports its initial state without starting one.
func (s *Session) Snapshot(ctx context.Context) (State, error) {
	release, err := s.turn.acquire(ctx)
	if err != nil {
		return s.State(), err
	}
	s.mu.Lock()
	sh, closed := s.sh, s.closed
	s.mu.Unlock()
	if closed {
		release()
		return s.State(), ErrClosed
	}
	if sh != nil && !sh.isDead() {
		res, err := sh.exec(ctx, ":", Options{snapshot: true}, s.dir)
		s.afterCommand(sh, res, true)
		if sh.isDead() {
			s.discard(sh)
		}
		if err != nil {
			release()
			return s.State(), err
		}
	}
	release()
	return s.State(), nil
}

// State reports what the session knows now. It never waits for a running
// command.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	st.Busy = s.busy
	if s.sh != nil && s.sh.isDead() {
		st.Alive, st.Pid = false, 0
	}
	st.Env = append([]string(nil), s.state.Env...)
	st.BackgroundBytes = s.cfg.bg.size()
	return st
}

// Closed reports whether Close was called. It never waits.
func (s *Session) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops the session's shell and everything it started (grace, then
// kill) and releases the session. A running command ends as cancelled;
// commands waiting for their turn get ErrClosed.
func (s *Session) Close() error {
	sh, ok := s.markClosed()
	if !ok {
		return nil
	}
	var err error
	if sh != nil {
		sh.markClosing()
		err = sh.stop(s.cfg.Grace)
	}
	if s.cfg.HoldDir == "" {
		os.RemoveAll(s.dir)
	} else {
		removeHeld(s.dir)
	}
	return err
}

// Detach lets the session go without stopping its shell, for an owner that
// is about to exit (a daemon stopping): with HoldDir set, the shell goes on
// and a later Attach takes it over. A running command's Exec returns at
// once, as cancelled, while the command itself goes on in the shell; its
// output from then on is for the next owner to discard. The session is
// closed for this process. Without HoldDir, Detach is Close.
func (s *Session) Detach() error {
	if s.cfg.HoldDir == "" {
		return s.Close()
	}
	if sh, ok := s.markClosed(); ok && sh != nil {
		sh.detach()
	}
	return nil
}

// markClosed closes the session for this process and takes its shell (nil
// if none); ok is false if it was closed already.
func (s *Session) markClosed() (sh *shell, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	s.closed = true
	sh, s.sh = s.sh, nil
	s.state.Alive, s.state.Pid = false, 0
	return sh, true
}

// withoutMarker drops the shell tree's own marker from an environment the
// shell reported: it names that tree, not the session, and a shell started
// from the environment gets a marker of its own.
func withoutMarker(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, corral.MarkerEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// joinErr joins two parts of a result's Error text.
func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// newResult is the result of a command before anything is known of it,
// not even the shell it was to run in.
func newResult() *corral.Result { return corral.NewResult(corral.Identity{}) }

func startFailed(err error) (*corral.Result, error) { return corral.StartFailed(newResult(), err) }

// deleteEnv is env without its entries for name.
func deleteEnv(env []string, name string) []string {
	out := env[:0]
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// lookupEnv is env's entries for name.
func lookupEnv(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}
