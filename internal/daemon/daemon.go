// Package daemon is the core of corral's daemon: the registry of named
// sessions, their records, start-up recovery, oneshots, and the reaper of
// what crashed sessions left. It knows no transport: its methods (Exec,
// List, Kill, Status, Stop) take a Peer and domain types and return domain
// types and the errors of errors.go; internal/daemon/server serves it on
// the state directory's socket (the protocol is internal/wire's), and it
// is tested in this process without one (core_test.go).
//
// Each session's shell is a held shell (session.Config.HoldDir): a
// contained tree of its own whose command channel and output are FIFOs in
// the session's directory, held open by the shell itself. No keeper
// process stands between the daemon and the shell, yet killing the daemon
// costs no session: the shell goes on, and the next daemon takes it over
// (session.Attach) after checking its recorded identity (pid, start time,
// boot id, cgroup). The daemon keeps a durable record of every session
// (internal/store) with its shell's identity, written before the shell runs
// its first instruction. A recorded shell that is gone (a reboot, a kill)
// makes its session down: what is left of its tree is killed through the
// identity gate, and the next command starts a fresh shell in the saved
// working directory and environment.
//
//	<state>/
//	    corral.sock          the daemon's socket (0600; other uids are refused): internal/daemon/server
//	    corral.db            session records
//	    daemon.pid
//	    sessions/<name>/     a held shell's FIFOs: ctl, out, err, in-* (0700);
//	                         a terminal session's holder: sock, holder.json,
//	                         tree.json, holder.log (terminal.go)
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/fds"
	"github.com/corral-dev/corral/internal/record"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/session"
)

// Config describes a daemon.
type Config struct {
	// StateDir holds the socket, the store and the sessions' FIFOs.
	StateDir string
	// Isolation contains new sessions' shells ("" is auto).
	Isolation corral.Isolation
	// Log receives one line per lifecycle decision: start, take-over,
	// sessions found down or broken, shells started, kills, stop. Nil
	// discards.
	Log *slog.Logger
	// Holder is the command line that runs a terminal session's holder
	// (nil: this executable's "holder" role; see terminal.Config).
	Holder []string
}

// Daemon is the daemon's core: the registry of sessions, their records,
// recovery and oneshots. It knows no transport: its methods take and
// return domain types and the errors of errors.go, and each takes the
// Peer that asks (see internal/daemon/server for the one that serves it
// on a socket).
type Daemon struct {
	cfg     Config
	store   *store.Store
	runs    record.Store // records of oneshot trees
	started time.Time
	stopped chan struct{}
	once    sync.Once // Close
	stopReq sync.Once // closes stopped
	uid     int       // the only peer uid served
	began   bool      // Start ran: the pid file is this daemon's

	reaped atomic.Int64 // orphaned trees reapRuns killed (see health.go)
	// takeovers and resets count shells taken over and sessions' shells
	// discarded for a fresh one (health.go).
	takeovers, resets atomic.Int64

	recording sync.Mutex // one recordState at a time; taken before mu

	// mu guards the fields that follow.
	mu       sync.Mutex
	sessions map[string]*session.Session
	names    map[string]*sync.Mutex // one creation or kill at a time per name
	written  map[string]written     // what was last written of each session's state
	closing  bool
	oneshots sync.WaitGroup // running oneshots; added to only while !closing
	// recovering holds the recorded sessions whose start-up recovery
	// (take-over or reap) has not ended; each is removed, its done
	// closed, when it has.
	recovering map[string]*recovery
	// terms holds the terminal sessions' holders (terminal.go).
	terms terms

	// recovered is closed when start-up recovery has been through every
	// record (some may still be retrying a take-over). endRecovery
	// cancels what is left of it; bg counts its goroutines, which
	// Close waits for.
	recovered   chan struct{}
	endRecovery context.CancelFunc
	bg          sync.WaitGroup

	// stopping ends when a stopping daemon's grace for commands is over:
	// oneshots, which no later daemon can take over, are cancelled then.
	stopping     context.Context
	stopOneshots context.CancelCauseFunc
}

// Peer is who makes a request: a local process, named by its uid
// (SO_PEERCRED on the unix socket), or a remote client, named by its
// verified client certificate (a TLS connection: internal/daemon/server
// has verified it; the core trusts the front-end's authentication and
// decides what the identity may do).
type Peer struct {
	// UID is a local peer's uid (ignored for a remote one).
	UID int
	// Name is a remote peer's identity, its certificate's name; "" for a
	// local peer.
	Name string
	// ReadOnly marks a remote identity that may list sessions and read
	// the daemon's status, but not run, kill or stop anything.
	ReadOnly bool
	// Addr is a remote peer's address, for the log.
	Addr string
}

// Remote reports whether p is a remote client (a TLS identity).
func (p Peer) Remote() bool { return p.Name != "" }

// String names p for the log and for errors.
func (p Peer) String() string {
	if p.Remote() {
		return fmt.Sprintf("identity %q", p.Name)
	}
	return fmt.Sprintf("uid %d", p.UID)
}

// authorize refuses a peer that may not use this daemon: a local process
// of another uid. A remote identity was authenticated by its front-end.
func (d *Daemon) authorize(p Peer) error {
	if !p.Remote() && p.UID != d.uid {
		return fmt.Errorf("%w: uid %d may not use the daemon of uid %d", ErrPermission, p.UID, d.uid)
	}
	return nil
}

// authorizeChange is authorize for a request that runs, kills or stops
// something (what): a read-only identity may not.
func (d *Daemon) authorizeChange(p Peer, what string) error {
	if err := d.authorize(p); err != nil {
		return err
	}
	if p.ReadOnly {
		return fmt.Errorf("%w: %s is read-only: it may list sessions and read the daemon's status, not %s (issue it a certificate without --read-only to allow that)",
			ErrPermission, p, what)
	}
	return nil
}

// stateRecovering is how List shows a session whose start-up recovery has
// not ended (its shell is being taken over or its tree reaped).
const stateRecovering = "recovering"

// Open prepares a daemon: the store (which only one daemon of a state
// directory holds at a time) and the sessions' directory. Start then
// recovers the recorded sessions; Close releases it all.
func Open(cfg Config) (*Daemon, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	// Shells live as long as their sessions: none may get a descriptor
	// this process inherited (its starter's pipe, say) and keep it open.
	if err := fds.CloseOnExecFrom(3); err != nil {
		cfg.Log.Warn("cannot mark inherited descriptors close-on-exec; shells may inherit them", "err", err)
	}
	// The state directory and what is made in it must be ours alone: who
	// else could change them could read and forge what we send shells.
	if _, err := statedir.Ensure(cfg.StateDir, "sessions"); err != nil {
		return nil, err
	}
	runs, err := statedir.Ensure(cfg.StateDir, "runs")
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(cfg.StateDir, "corral.db"))
	if errors.Is(err, store.ErrLocked) {
		return nil, Running(cfg.StateDir, err)
	}
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, store: st, runs: record.Store{Dir: runs}, started: time.Now(), stopped: make(chan struct{}),
		uid: os.Getuid(), sessions: map[string]*session.Session{}, names: map[string]*sync.Mutex{}, written: map[string]written{},
		recovering: map[string]*recovery{}, recovered: make(chan struct{})}
	d.stopping, d.stopOneshots = context.WithCancelCause(context.Background())
	d.endRecovery = func() {}
	return d, nil
}

// Start recovers the recorded sessions: it writes the pid file (which
// names the owner of the socket from then on, so the caller has made it
// its own), and lets recovery run for recoverBudget before it returns;
// what is left of it (a slow reap, a take-over to retry) goes on in the
// background, and those sessions answer as recovering meanwhile. Only the
// daemon that owns the socket may Start: it takes shells over.
func (d *Daemon) Start() {
	d.began = true
	boundMemory()
	if err := os.WriteFile(filepath.Join(d.cfg.StateDir, "daemon.pid"), []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600); err != nil {
		d.cfg.Log.Warn("cannot write the pid file", "err", err)
	}
	d.cfg.Log.Info("daemon starting", "pid", os.Getpid(), "state_dir", d.cfg.StateDir)
	d.limitSessionPids()
	d.startRecovery()
	select {
	case <-d.recovered:
	case <-time.After(recoverBudget):
		d.mu.Lock()
		n := len(d.recovering)
		d.mu.Unlock()
		d.cfg.Log.Info("serving while sessions are still being recovered", "recovering", n)
	}
}

// ErrRunning means another daemon serves this state directory.
var ErrRunning = errors.New("a daemon is already running")

// runningError says which daemon holds the state directory: its pid when
// its pid file names one. It is ErrRunning, and the cause (the locked store
// or the live socket) for errors.Is.
type runningError struct {
	dir   string
	pid   int
	cause error
}

// Running is the error that says another daemon holds dir (its store, or
// its socket: cause).
func Running(dir string, cause error) error {
	e := &runningError{dir: dir, cause: cause}
	b, _ := os.ReadFile(filepath.Join(dir, "daemon.pid"))
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
		e.pid = pid
	}
	return e
}

func (e *runningError) Error() string {
	if e.pid > 0 {
		return fmt.Sprintf("%v for %s (pid %d)", ErrRunning, e.dir, e.pid)
	}
	return fmt.Sprintf("%v for %s", ErrRunning, e.dir)
}

func (e *runningError) Unwrap() []error { return []error{ErrRunning, e.cause} }

// StopRequested is closed once a peer asked the daemon to stop (Stop).
func (d *Daemon) StopRequested() <-chan struct{} { return d.stopped }

// Release lets every session go without stopping its shell (a command
// still running goes on; its caller gets an error) and cancels the
// oneshots, waiting (bounded) until each has killed its tree: what a
// front-end calls when the calls under way have not ended within its
// bound for a stop. No command starts after it.
func (d *Daemon) Release() {
	d.detachAll()
	d.endOneshots()
}

// Close ends the daemon: what is left of recovery is stopped, every
// session let go (its shell keeps running, for the next daemon to take
// over) and the store released. It kills nothing and purges no record.
func (d *Daemon) Close() {
	d.once.Do(func() {
		d.stopRecovery()
		d.detachAll()
		d.store.Close()
		if d.began { // else it names another daemon, or none
			os.Remove(filepath.Join(d.cfg.StateDir, "daemon.pid"))
		}
		d.cfg.Log.Info("daemon stopped; every session's shell goes on")
	})
}

// errStopping is why a stopping daemon cancels a oneshot.
var errStopping = errors.New("the daemon is stopping")

// endOneshots cancels the running oneshots and waits, bounded, until each
// has killed its tree and sent its client the result.
func (d *Daemon) endOneshots() {
	d.mu.Lock()
	d.closing = true // no oneshot starts after this
	d.mu.Unlock()
	d.stopOneshots(errStopping)
	done := make(chan struct{})
	go func() { d.oneshots.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(oneshotStopBound):
		d.cfg.Log.Error("oneshots still running after cancel; their records stay for the next daemon")
	}
}

// oneshotStopBound bounds endOneshots: a cancelled tree's grace, the
// bound on its kill, and its drain.
const oneshotStopBound = 20 * time.Second

func (d *Daemon) detachAll() {
	d.mu.Lock()
	d.closing = true
	ss := d.sessions
	d.sessions = map[string]*session.Session{}
	d.mu.Unlock()
	d.releaseTerms()
	for _, s := range ss {
		if session.CanAttach() {
			s.Detach()
		} else {
			// No later daemon could verify and take the shell over: end
			// it now, so that the session is down (and restored in its
			// saved cwd and environment), not broken.
			s.Close()
		}
	}
}

// holdDir is the directory of the named session's FIFOs.
func (d *Daemon) holdDir(name string) string {
	return filepath.Join(d.cfg.StateDir, "sessions", name)
}

// recoverBudget is how long Open lets start-up recovery run before it
// serves: long enough for the take-overs of a healthy restart, short
// enough that a client (which gives up after 10 s) is answered.
const recoverBudget = 2 * time.Second

// recoverWorkers is how many sessions are recovered at once, so that a
// few slow reaps (each bounded by contain.KillBound) do not hold up the
// rest.
const recoverWorkers = 4

// recoverStopBound is how long a stopping daemon waits for recovery
// still under way.
const recoverStopBound = 2 * time.Second

// recoverWait is how long a command for a session still being recovered
// waits for it before it is told so.
const recoverWait = 5 * time.Second

// retryBackoff bounds the wait between attempts to take over a shell that
// could not be taken over for a local shortage (descriptors, memory).
var retryBackoff = [2]time.Duration{500 * time.Millisecond, 10 * time.Second}

// recovery is one recorded session's start-up recovery.
type recovery struct {
	done   chan struct{} // closed when it has ended
	reason string        // why it is not over yet (a failed take-over); guarded by Daemon.mu
}

// startRecovery marks every recorded session with a shell as recovering
// and recovers them in the background, recoverWorkers at a time: each
// live shell that is what its record says is taken over; what is left of
// the others is killed through the recorded identity and the session is
// marked down. A take-over that fails for a reason of this process's own
// (no descriptor, no memory) leaves the shell alone and is retried. Then
// the orphaned oneshot trees are reaped, and recovered is closed. Each
// record is updated in one transaction, so a listing sees it either
// before or after, never half.
func (d *Daemon) startRecovery() {
	ctx, cancel := context.WithCancel(context.Background())
	d.endRecovery = cancel
	recs, err := d.store.All()
	if err != nil {
		d.cfg.Log.Error("cannot read the session records; no shell taken over", "err", err)
		recs = nil
	}
	var todo []*store.Session
	d.mu.Lock()
	for _, rec := range recs {
		if rec.Tree != nil {
			todo = append(todo, rec)
			d.recovering[rec.Name] = &recovery{done: make(chan struct{})}
		}
	}
	d.mu.Unlock()
	// Live shells first: their take-overs are quick and must not wait
	// behind the reaps of dead ones.
	live := map[string]bool{}
	for _, r := range todo {
		live[r.Name] = contain.ProcessAlive(r.Tree.Pid, r.Tree.StartTime)
	}
	slices.SortStableFunc(todo, func(a, b *store.Session) int {
		switch aa, ba := live[a.Name], live[b.Name]; {
		case aa && !ba:
			return -1
		case ba && !aa:
			return 1
		}
		return 0
	})
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer close(d.recovered)
		work := make(chan *store.Session)
		var wg sync.WaitGroup
		for i := 0; i < recoverWorkers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rec := range work {
					if d.recoverSession(rec.Name, rec) {
						d.retryTakeOver(ctx, rec.Name)
					}
				}
			}()
		}
	feed:
		for _, rec := range todo {
			select {
			case work <- rec:
			case <-ctx.Done():
				break feed
			}
		}
		close(work)
		wg.Wait()
		if ctx.Err() == nil {
			d.reapRuns()
		}
	}()
}

// retryTakeOver retries, in the background with a growing wait, the
// take-over of a session's shell that failed for a local shortage, until
// it is taken over, found gone, killed, or the daemon stops.
func (d *Daemon) retryTakeOver(ctx context.Context, name string) {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		wait := retryBackoff[0]
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if !d.recoverSession(name, nil) {
				return
			}
			wait = min(2*wait, retryBackoff[1])
		}
	}()
}

// recoverSession recovers one recorded session (rec, or its record read
// afresh if nil) and reports whether to try again later: its shell is
// alive but could not be taken over for a reason that is no proof it is
// gone or not ours (a descriptor shortage, say). Such a shell is never
// signalled.
func (d *Daemon) recoverSession(name string, rec *store.Session) (retry bool) {
	lock := d.nameLock(name)
	lock.Lock()
	defer lock.Unlock()
	d.mu.Lock()
	_, pending := d.recovering[name]
	d.mu.Unlock()
	if !pending { // killed before its turn
		return false
	}
	if rec == nil {
		var err error
		if rec, err = d.store.Get(name); err != nil {
			if errors.Is(err, store.ErrNotFound) { // killed meanwhile
				d.recoveredOne(name)
				return false
			}
			d.stillRecovering(name, err)
			return true
		}
	}
	if rec.Tree == nil {
		d.recoveredOne(name)
		return false
	}
	if store.KindOf(rec) == store.KindTerminal {
		d.recoverTerm(name, rec)
		d.recoveredOne(name)
		return false
	}
	// A record with a socket names a keeper process of an older corral:
	// it cannot be taken over, only reaped.
	if rec.Tree.KeeperSocket == "" {
		s, err := session.Attach(d.sessionConfig(rec), rec.Tree.Identity,
			session.State{Cwd: rec.Cwd, Env: rec.Env, Fifos: fifosOf(rec.Tree.Fifos)})
		if err == nil {
			d.mu.Lock()
			closing := d.closing
			if !closing {
				d.sessions[rec.Name] = s
			}
			d.mu.Unlock()
			if closing {
				s.Detach() // the next daemon takes it over
				return false
			}
			d.store.Update(rec.Name, func(r *store.Session) error { r.State = store.Up; return nil })
			d.cfg.Log.Info("took over shell", "session", rec.Name, "pid", rec.Tree.Pid)
			d.takeovers.Add(1)
			d.recoveredOne(name)
			d.bg.Add(1)
			go func() {
				defer d.bg.Done()
				d.recordTakeover(name, s)
			}()
			return false
		}
		if errors.Is(err, session.ErrNotOurs) || errors.Is(err, corral.ErrNotOurs) {
			// Someone else's files stand where the shell's were, or
			// the recorded shell is a live process that is not
			// proved a tree corral started (a forged or corrupted
			// record): nothing was sent or signalled, and the process
			// is left alone (its record kept) until the next command
			// or a kill settles it through its identity.
			d.store.Update(rec.Name, func(r *store.Session) error {
				r.State, r.Reason = store.Broken, err.Error()
				return nil
			})
			d.cfg.Log.Warn("session broken: refused to take over its shell", "session", rec.Name, "pid", rec.Tree.Pid, "err", err)
			d.recoveredOne(name)
			return false
		}
		if !errors.Is(err, contain.ErrGone) && contain.ProcessAlive(rec.Tree.Pid, rec.Tree.StartTime) {
			d.cfg.Log.Warn("cannot take over shell now; it is left alone and tried again", "session", rec.Name,
				"pid", rec.Tree.Pid, "err", err)
			d.stillRecovering(name, err)
			return true
		}
		d.cfg.Log.Info("cannot take over shell", "session", rec.Name, "pid", rec.Tree.Pid, "err", err)
	}
	d.settle(rec.Name, rec.Tree)
	d.recoveredOne(name)
	return false
}

// recordTakeover records what a take-over learnt of a shell. A command
// that was running when the last daemon died goes on in its held shell
// and may change its cwd and environment with no daemon to record them;
// the take-over's resync learns them, and a reboot after it must not lose
// them. Snapshot queues behind the resync (and behind any command a
// client sent meanwhile, which records its own state).
func (d *Daemon) recordTakeover(name string, s *session.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), session.TakeoverBound+5*time.Second)
	defer cancel()
	if _, err := s.Snapshot(ctx); err != nil {
		if !errors.Is(err, session.ErrClosed) {
			d.cfg.Log.Warn("cannot learn the state of a taken-over shell", "session", name, "err", err)
		}
		return
	}
	if err := d.writeState(name, s, false); err != nil {
		d.cfg.Log.Warn("cannot record the state of a taken-over shell", "session", name, "err", err)
	}
	// The record's limits are the session's: a daemon that died after it
	// changed the cgroup and before it recorded the change told no
	// client, so the cgroup goes back to what is recorded.
	if err := s.EnforceLimits(ctx); err != nil && !errors.Is(err, session.ErrClosed) {
		d.cfg.Log.Warn("cannot give a taken-over shell its recorded limits", "session", name, "err", err)
	}
}

// stillRecovering records why name's recovery is not over.
func (d *Daemon) stillRecovering(name string, err error) {
	d.mu.Lock()
	if r := d.recovering[name]; r != nil {
		r.reason = "take-over to be retried: " + err.Error()
	}
	d.mu.Unlock()
}

// recoveredOne ends name's recovery: commands waiting for it go on.
func (d *Daemon) recoveredOne(name string) {
	d.mu.Lock()
	r := d.recovering[name]
	delete(d.recovering, name)
	d.mu.Unlock()
	if r != nil {
		close(r.done)
	}
}

// awaitRecovery waits, up to recoverWait, until name is not being
// recovered; a session still being recovered then is an error that says
// so.
func (d *Daemon) awaitRecovery(name string) error {
	d.mu.Lock()
	r := d.recovering[name]
	d.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-time.After(recoverWait):
	}
	d.mu.Lock()
	reason := r.reason
	d.mu.Unlock()
	if reason == "" {
		reason = "its shell's tree is being reaped"
	}
	return fmt.Errorf("%w: session %s is still being recovered (%s); try again", ErrRecovering, name, reason)
}

// stopRecovery cancels what is left of start-up recovery and waits, up to
// recoverStopBound, for it to end. A reap still under way then (each is
// bounded by contain.KillBound) is left to finish or be cut off with the
// process: the record stays, and the next daemon recovers that session.
func (d *Daemon) stopRecovery() {
	d.endRecovery()
	done := make(chan struct{})
	go func() { d.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(recoverStopBound):
		d.cfg.Log.Error("start-up recovery still running at stop; the next daemon recovers what is left")
	}
}

// settle kills what is left of a recorded shell tree that is not held
// (through its identity) and marks the session down; if that cannot be
// done, the session is broken, its identity kept for another attempt.
func (d *Daemon) settle(name string, k *store.Shell) error {
	if err := session.Reap(k.Identity); err != nil {
		d.store.Update(name, func(r *store.Session) error {
			r.State, r.Reason = store.Broken, err.Error()
			return nil
		})
		d.cfg.Log.Warn("session broken", "session", name, "err", err)
		return err
	}
	d.cfg.Log.Info("session down", "session", name)
	return d.store.Update(name, func(r *store.Session) error {
		r.State, r.Tree, r.Reason = store.Down, nil, ""
		return nil
	})
}

// sessionConfig is the session of rec: its shell, held in its directory,
// starting (and restarting after a reset) in its saved directory and
// environment, with each new shell's identity recorded before it runs.
func (d *Daemon) sessionConfig(rec *store.Session) session.Config {
	dir := rec.Cwd
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = "/"
	}
	name := rec.Name
	return session.Config{
		Shell: rec.Shell, Dir: dir, Env: rec.Env, TrackEnv: true, RestoreOnReset: true, Isolation: d.cfg.Isolation,
		HoldDir: d.holdDir(name), Limits: limitsOf(rec), Umask: rec.Umask,
		OnHeld: func(id corral.Identity, f session.Fifos) error {
			d.cfg.Log.Info("shell started", "session", name, "pid", id.Pid, "isolation", id.Isolation)
			return d.store.Update(name, func(r *store.Session) error {
				r.Tree, r.State = &store.Shell{Identity: id}, store.Up
				r.Tree.Fifos = &store.Fifos{Ctl: store.FileID(f.Ctl), Out: store.FileID(f.Out), Err: store.FileID(f.Err)}
				return nil
			})
		},
	}
}

// limitsOf is a session record's limits (zero if none).
func limitsOf(rec *store.Session) corral.Limits {
	if rec.Limits == nil {
		return corral.Limits{}
	}
	return *rec.Limits
}

// fifosOf is the recorded FIFOs of a held shell (zero if not recorded).
func fifosOf(f *store.Fifos) session.Fifos {
	if f == nil {
		return session.Fifos{}
	}
	return session.Fifos{Ctl: session.FileID(f.Ctl), Out: session.FileID(f.Out), Err: session.FileID(f.Err)}
}

// nameLock returns the lock that orders creations and kills of name.
func (d *Daemon) nameLock(name string) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.names[name]
	if l == nil {
		l = &sync.Mutex{}
		d.names[name] = l
	}
	return l
}

// sessionFor returns the session name, creating its record (from dir,
// env and limits) on first use. A session that is down gets its shell on
// its first command. Limits that cannot be enforced here refuse the
// creation (an error wrapping corral.ErrIsolation) before anything is
// written.
func (d *Daemon) sessionFor(name, dir string, env []string, umask *uint32, limits corral.Limits) (*session.Session, error) {
	if err := d.awaitRecovery(name); err != nil {
		return nil, err
	}
	lock := d.nameLock(name)
	lock.Lock()
	defer lock.Unlock()
	d.mu.Lock()
	s, closing := d.sessions[name], d.closing
	d.mu.Unlock()
	if closing {
		return nil, ErrStopping
	}
	if s != nil && !s.Closed() {
		return s, nil
	}
	rec, err := d.store.Get(name)
	created := false
	if err == nil && store.KindOf(rec) == store.KindTerminal {
		return nil, badRequest(fmt.Errorf("session %s is a terminal session: drive it with corral term send/screen/wait or corral attach, not exec", name))
	}
	if errors.Is(err, store.ErrNotFound) {
		// Refused before anything is written: a refused creation leaves
		// no record behind.
		if err := checkCreate(dir, env); err != nil {
			return nil, badRequest(err)
		}
		limits = corral.Limits{}.Apply(limits)
		if err := corral.CheckLimits(d.cfg.Isolation, limits); err != nil {
			return nil, fmt.Errorf("session %s not created: %w", name, err)
		}
		now := time.Now().UTC()
		rec = &store.Session{Name: name, Created: now, LastUsed: now, Shell: shellOf(env),
			Cwd: dir, Env: env, Umask: umask, State: store.Down}
		if !limits.IsZero() {
			rec.Limits = &limits
		}
		if err := d.store.Put(rec); err != nil {
			return nil, err
		}
		created = true
	} else if err != nil {
		return nil, err
	}
	if rec.Tree != nil {
		if err := d.settle(name, rec.Tree); err != nil {
			return nil, fmt.Errorf("%w: session %s is broken: %v (corral kill %s drops it)", ErrBroken, name, err, name)
		}
	}
	if _, err := statedir.Ensure(d.cfg.StateDir, "sessions", name); err != nil {
		return nil, d.unmake(name, created, err)
	}
	if s, err = session.New(d.sessionConfig(rec)); err != nil {
		return nil, d.unmake(name, created, err)
	}
	d.mu.Lock()
	d.sessions[name] = s
	d.mu.Unlock()
	return s, nil
}

// unmake undoes the creation of a session that could not be made (its
// record, just written, and its directory) and returns err: a session is
// created whole or not at all.
func (d *Daemon) unmake(name string, created bool, err error) error {
	if created {
		if derr := d.store.Delete(name); derr != nil && !errors.Is(derr, store.ErrNotFound) {
			d.cfg.Log.Warn("cannot remove the record of a session not created", "session", name, "err", derr)
		}
		os.RemoveAll(d.holdDir(name))
	}
	return err
}

// shellOf picks the session's shell: the creating client's $SHELL if it is
// a POSIX-compatible shell that exists here, else /bin/sh.
func shellOf(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "SHELL="); ok {
			switch filepath.Base(v) {
			case "bash", "zsh", "dash", "ksh", "mksh", "sh":
				if _, err := exec.LookPath(v); err == nil {
					return v
				}
			}
		}
	}
	return "/bin/sh"
}

// ExecRequest is one command for Exec, checked (CheckExec).
type ExecRequest struct {
	// Session names the session (created on first use); "" with Oneshot.
	Session string
	// Command is shell code.
	Command string
	// Oneshot runs the command in a fresh contained shell instead.
	Oneshot bool
	// Dir and Env are where a session this command creates starts, and
	// where a oneshot runs.
	Dir string
	Env []string
	// Umask, if not nil, is the umask of a session this command creates
	// (nil: the daemon's).
	Umask *uint32
	// BackgroundOutput runs nothing: the session's kept background output
	// is written to the Options' Stdout and Stderr, and forgotten.
	BackgroundOutput bool
	// Cwd, if set, is entered before the command; in a session the cd
	// persists. One that cannot be entered is a start failure.
	Cwd string
	// Options are the command's stdio, limits and stop policy.
	Options session.Options
	// Limits are the resource limits of the session this command creates
	// (or of the oneshot's tree); for an existing session, a change to
	// its limits, made before the command runs (a positive field sets a
	// limit, a negative one removes it, zero leaves it).
	Limits corral.Limits
}

// ExecResult is what Exec returns of a command that ran (or failed to
// start).
type ExecResult struct {
	*corral.Result
	// Cwd is the session's working directory after the command ("" for a
	// oneshot, or a session whose shell is gone).
	Cwd string
	// StateNotSaved, if not nil, says why the session's state after the
	// command could not be recorded (the live shell has it).
	StateNotSaved error
	// Limits are the session's resource limits after the command (or
	// the oneshot's); LimitsChanged says this command changed those of
	// an existing session.
	Limits        corral.Limits
	LimitsChanged bool
}

// Exec runs one command: in a oneshot shell, or in its session, creating
// the session on first use. Cancelling ctx stops it (its cause, a
// *corral.StopCause, may name the first signal). The session's state
// after the command is recorded (and synced) before Exec returns: what a
// client is told must survive a crash, or the result says it was not
// saved. An error without a result means the command did not run: a
// refused request (ErrBadRequest), a session that is broken, still being
// recovered or closed, a daemon stopping.
func (d *Daemon) Exec(ctx context.Context, p Peer, req ExecRequest) (*ExecResult, error) {
	if err := d.authorizeChange(p, "run commands"); err != nil {
		d.cfg.Log.Warn("request refused", "peer", p.String(), "addr", p.Addr, "call", "exec", "err", err)
		return nil, err
	}
	if p.Remote() {
		// The client's cwd and environment mean nothing here: a remote
		// command starts from the daemon's own.
		req.Dir, req.Env = remoteStart(req.Dir, req.Env)
		req.Umask = nil
	}
	if req.BackgroundOutput {
		return d.takeBackground(req)
	}
	if req.Oneshot {
		if res := enterable(req.Cwd); res != nil {
			return &ExecResult{Result: res}, nil
		}
		out, err := d.ran(d.runOnce(ctx, req))
		if out != nil {
			out.Limits = corral.Limits{}.Apply(req.Limits)
		}
		return out, err
	}
	name := req.Session
	s, err := d.sessionFor(name, req.Dir, req.Env, req.Umask, req.Limits)
	if errors.Is(err, corral.ErrIsolation) {
		// As corral run with limits it cannot enforce: a start failure.
		return &ExecResult{Result: startFailed(err.Error())}, nil
	}
	if err != nil {
		return nil, err
	}
	limits, changed := s.Limits(), false
	if next := limits.Apply(req.Limits); next != limits {
		if limits, err = s.SetLimits(ctx, req.Limits); err != nil {
			if errors.Is(err, session.ErrClosed) {
				return nil, fmt.Errorf("%w before the command ran", ErrSessionClosed)
			}
			if ctx.Err() != nil {
				res, _ := corral.NotStarted(ctx, startFailed(""), "ended while waiting to change the session's limits: nothing ran")
				return &ExecResult{Result: res, Limits: limits}, nil
			}
			return &ExecResult{Result: startFailed(fmt.Sprintf("the session's limits were not changed, and the command did not run: %v", err)), Limits: limits}, nil
		}
		changed = true
		d.cfg.Log.Info("session limits changed", "session", name, "memory_max", limits.MemoryMax, "memory_high", limits.MemoryHigh,
			"cpus", limits.CPUs, "pids_max", limits.PidsMax)
	}
	var limitsErr error
	if changed {
		limitsErr = d.store.Update(name, func(r *store.Session) error {
			r.Limits = nil
			if !limits.IsZero() {
				l := limits
				r.Limits = &l
			}
			return nil
		})
		if limitsErr != nil {
			limitsErr = fmt.Errorf("the session's new limits are in force but not recorded (a reset after a daemon restart may lose them): %w", limitsErr)
		}
	}
	if req.Cwd != "" {
		if res := d.enter(ctx, s, req.Cwd, req.Options); res != nil {
			return &ExecResult{Result: res}, nil
		}
	}
	resetsBefore := s.State().Resets
	out, err := d.ran(s.Exec(ctx, req.Command, req.Options))
	d.resets.Add(int64(s.State().Resets - resetsBefore))
	if err != nil {
		return nil, err
	}
	out.Limits, out.LimitsChanged = limits, changed
	if rerr := d.recordState(name, s); rerr != nil || limitsErr != nil {
		out.StateNotSaved = errors.Join(limitsErr, rerr)
	}
	if st := s.State(); st.Alive {
		out.Cwd = st.Cwd
	}
	return out, nil
}

// ran classifies what a session's Exec or RunOnce returned.
func (d *Daemon) ran(res *corral.Result, err error) (*ExecResult, error) {
	switch {
	case errors.Is(err, session.ErrBadCommand):
		return nil, badRequest(err)
	case res == nil && err == nil:
		return nil, errors.New("the session returned no result")
	case res == nil:
		return nil, err
	case errors.Is(err, session.ErrClosed) && res.Outcome == corral.OutcomeStartFailed:
		// Killed (or let go) before the command's turn came: nothing ran.
		return nil, fmt.Errorf("%w before the command ran: %v", ErrSessionClosed, res.Error)
	}
	return &ExecResult{Result: res}, nil
}

// enterable checks that dir ("" for none) is a directory a command can be
// started in; if not, it returns the start failure that says why.
func enterable(dir string) *corral.Result {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return startFailed(fmt.Sprintf("cwd %s: %v", dir, errors.Unwrap(err)))
	case !fi.IsDir():
		return startFailed(fmt.Sprintf("cwd %s: not a directory", dir))
	}
	return nil
}

func startFailed(why string) *corral.Result {
	return &corral.Result{Outcome: corral.OutcomeStartFailed, ExitCode: -1, FirstOutput: -1, Error: why}
}

// enterBound bounds the cd that enters a command's Cwd.
const enterBound = 10 * time.Second

// enter makes s's shell enter dir before a command (a cd of its own, so
// that the command's text is the caller's, whatever it holds): nil once
// it has, else the start failure that says why, with the shell's own
// words.
func (d *Daemon) enter(ctx context.Context, s *session.Session, dir string, o session.Options) *corral.Result {
	if res := enterable(dir); res != nil {
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, enterBound)
	defer cancel()
	var errb bytes.Buffer
	res, err := s.Exec(ctx, "cd -- "+shellQuote(dir), session.Options{Stderr: &limitedBuffer{b: &errb, n: 4 << 10},
		Grace: o.Grace, StopSignal: o.StopSignal, Escalate: o.Escalate})
	if res != nil && res.Outcome == corral.OutcomeExited && res.ExitCode == 0 {
		return nil
	}
	why := strings.TrimSpace(errb.String())
	switch {
	case res == nil:
		why = err.Error()
	case why == "" && res.Error != "":
		why = res.Error
	case why == "":
		why = fmt.Sprintf("the cd ended %s (exit %d)", res.Outcome, res.ExitCode)
	}
	return startFailed(fmt.Sprintf("cwd %s: cannot enter it: %s", dir, why))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (w *limitedBuffer) Write(p []byte) (int, error) {
	if room := w.n - w.b.Len(); room > 0 {
		w.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// runOnce runs a --oneshot command in a fresh shell contained as sessions'
// shells are. No session can take its tree over, so it is recorded in
// runs/ as a corral run's tree is, owned by this daemon: if the daemon
// dies mid-command, the next one (or corral reap) kills what it left.
func (d *Daemon) runOnce(ctx context.Context, req ExecRequest) (*corral.Result, error) {
	d.mu.Lock()
	if !d.closing {
		d.oneshots.Add(1)
		defer d.oneshots.Done()
	} // else stopping has ended: it is cancelled before it starts
	d.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(d.stopping, func() { cancel(context.Cause(d.stopping)) })()
	tracker := d.runs.Track([]string{"oneshot", req.Command})
	dir := req.Dir
	if req.Cwd != "" {
		dir = req.Cwd
	}
	cfg := session.Config{Shell: shellOf(req.Env), Dir: dir, Env: req.Env, Isolation: d.cfg.Isolation,
		OnStart: tracker.OnStart, Limits: corral.Limits{}.Apply(req.Limits)}
	res, err := session.RunOnce(ctx, cfg, req.Command, req.Options)
	if errors.Is(context.Cause(ctx), errStopping) && res != nil && res.Outcome == corral.OutcomeCancelled {
		res.Error = errStopping.Error() // the client is told why
	}
	if rerr := tracker.Done(res); rerr != nil {
		d.cfg.Log.Error("cannot remove a oneshot record", "err", rerr)
	}
	return res, err
}

// takeBackground writes the kept background output of the session
// req names to req's Stdout and Stderr, and forgets it. A session that is
// recorded but has no shell here keeps none.
func (d *Daemon) takeBackground(req ExecRequest) (*ExecResult, error) {
	if err := store.CheckName(req.Session); err != nil {
		return nil, badRequest(err)
	}
	d.mu.Lock()
	s := d.sessions[req.Session]
	d.mu.Unlock()
	if s == nil {
		if _, err := d.store.Get(req.Session); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("%w: %s", ErrNotFound, req.Session)
			}
			return nil, err
		}
	}
	now := time.Now()
	res := &corral.Result{Outcome: corral.OutcomeExited, FirstOutput: -1, StartedAt: now, EndedAt: now}
	if s == nil {
		return &ExecResult{Result: res}, nil
	}
	bg := s.TakeBackground()
	for i, w := range []io.Writer{req.Options.Stdout, req.Options.Stderr} {
		b := [2][]byte{bg.Stdout, bg.Stderr}[i]
		if len(b) == 0 || w == nil {
			continue
		}
		if _, err := w.Write(b); err != nil {
			res.OutputError = err.Error()
		}
	}
	res.StdoutBytes, res.StderrBytes = int64(len(bg.Stdout)), int64(len(bg.Stderr))
	if bg.Dropped > 0 {
		res.Error = fmt.Sprintf("%d earlier bytes of background output were not kept (at most %d of each stream are)", bg.Dropped, session.BackgroundMax)
	}
	return &ExecResult{Result: res, Limits: s.Limits()}, nil
}

// reapRuns kills the recorded trees (oneshots of a daemon that died, corral
// runs that were killed) whose owner is gone, through their identity.
func (d *Daemon) reapRuns() {
	reaped, errs := record.Reap(d.runs, false)
	for _, r := range reaped {
		switch r.Action {
		case record.Killed:
			d.reaped.Add(1)
			d.cfg.Log.Info("orphaned tree killed", "id", r.Record.ID, "argv", r.Record.Argv, "pids", r.Pids)
		case record.Failed:
			d.cfg.Log.Error("cannot reap an orphaned tree", "id", r.Record.ID, "argv", r.Record.Argv, "err", r.Error)
		}
	}
	for _, err := range errs {
		d.cfg.Log.Warn("unusable run record", "err", err)
	}
}

// written is what was last written of a session's state, and when.
type written struct {
	cwd string
	env []string
	at  time.Time
}

// lastUsedSlack is how stale a session's recorded last use may get: a
// command that changed neither cwd nor environment is not worth an fsync
// of its own more often than this.
const lastUsedSlack = time.Second

// recordState writes session name's cwd, environment and last use as s
// knows them now, unless only the last use changed and it was written less
// than lastUsedSlack ago. The store's transaction is synced (bbolt fsyncs
// each commit) before it returns nil. It fails only if the state could not
// be recorded; a session killed meanwhile has nothing to record.
func (d *Daemon) recordState(name string, s *session.Session) error {
	return d.writeState(name, s, true)
}

// writeState records s's cwd and environment; used says whether a
// command ran (then the last use is now): a take-over's resync is no use.
func (d *Daemon) writeState(name string, s *session.Session, used bool) error {
	// One writer at a time reads the state and writes it, so that a
	// command's write cannot land after, and undo, a later command's.
	// (bbolt runs one write transaction at a time anyway.)
	d.recording.Lock()
	defer d.recording.Unlock()
	st := s.State()
	if !used {
		err := d.store.Update(name, func(r *store.Session) error {
			r.Cwd, r.Env = st.Cwd, st.Env
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("recording session %s: %w", name, err)
		}
		return nil
	}
	now := time.Now()
	d.mu.Lock()
	w, ok := d.written[name]
	same := ok && w.cwd == st.Cwd && slices.Equal(w.env, st.Env)
	if same && now.Sub(w.at) < lastUsedSlack {
		d.mu.Unlock()
		return nil
	}
	d.written[name] = written{cwd: st.Cwd, env: st.Env, at: now}
	d.mu.Unlock()
	err := d.store.Update(name, func(r *store.Session) error {
		r.LastUsed = now.UTC()
		r.Cwd, r.Env = st.Cwd, st.Env
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) { // not found: killed meanwhile
		d.mu.Lock()
		defer d.mu.Unlock()
		if same {
			// Only the last use is stale: the record has the state.
			d.written[name] = w
			d.cfg.Log.Warn("cannot record the session's last use", "session", name, "err", err)
			return nil
		}
		// The live shell has the state; only its durable copy lags.
		// Forget what was written, so the next command tries again.
		delete(d.written, name)
		d.cfg.Log.Warn("cannot record the session's state", "session", name, "err", err)
		return fmt.Errorf("recording session %s: %w", name, err)
	}
	return nil
}

// CheckExec validates a request from a client before anything is created
// or started; a front-end calls it once, at its boundary. Every error is
// ErrBadRequest.
func CheckExec(r *ExecRequest) error {
	if err := checkExec(r); err != nil {
		return badRequest(err)
	}
	return nil
}

func checkExec(r *ExecRequest) error {
	o := &r.Options
	switch {
	case o.Timeout < 0:
		return errors.New("negative timeout")
	case o.MaxOutput < 0:
		return errors.New("negative output limit")
	case len(r.Command) > MaxCommand:
		return fmt.Errorf("command of %d bytes (at most %d)", len(r.Command), MaxCommand)
	case strings.IndexByte(r.Command, 0) >= 0:
		return errors.New("NUL byte in command")
	case r.Oneshot && r.Session != "":
		return errors.New("a oneshot command takes no session name")
	case r.BackgroundOutput && (r.Oneshot || r.Command != ""):
		return errors.New("background output is a session's: it takes a session name and no command")
	}
	for what, dir := range map[string]string{"dir": r.Dir, "cwd": r.Cwd} {
		switch {
		case dir != "" && !filepath.IsAbs(dir):
			return fmt.Errorf("%s %q is not absolute", what, dir)
		case len(dir) >= maxPath:
			return fmt.Errorf("%s of %d bytes (a path has at most %d)", what, len(dir), maxPath-1)
		case strings.IndexByte(dir, 0) >= 0:
			return fmt.Errorf("NUL byte in %s", what)
		}
	}
	for _, kv := range r.Env {
		if strings.IndexByte(kv, 0) >= 0 || !strings.Contains(kv, "=") {
			return fmt.Errorf("malformed environment entry %q", kv)
		}
	}
	if r.Oneshot {
		return nil
	}
	return store.CheckName(r.Session)
}

// MaxCommand bounds the shell code of one command.
const MaxCommand = 1 << 20

// SessionInfo describes one session as List gives it.
type SessionInfo struct {
	Name string
	// State is up, down, broken or recovering.
	State             string
	Shell, Cwd        string
	Created, LastUsed time.Time
	// ShellPid is the pid of the session's shell (0 when it is down).
	ShellPid int
	Busy     bool
	// Reason says why a session is broken or still being recovered.
	Reason string
	// Limits are the session's resource limits (zero: none).
	Limits corral.Limits
	// Usage is what the session's live shell tree holds now and has
	// used since that shell started; nil when no shell is held here.
	Usage *corral.Usage
	// Kind is exec or terminal; Term describes a terminal session.
	Kind string
	Term *TermListInfo
	// BackgroundBytes counts the background output the session keeps.
	BackgroundBytes int64
}

// List lists the sessions: their records from one consistent snapshot of
// the store, with the live state of the sessions this daemon holds.
func (d *Daemon) List(ctx context.Context, p Peer) ([]SessionInfo, error) {
	if err := d.authorize(p); err != nil {
		return nil, err
	}
	recs, err := d.store.List()
	if err != nil {
		return nil, err
	}
	out := make([]SessionInfo, 0, len(recs))
	for _, r := range recs {
		si := SessionInfo{Name: r.Name, State: string(r.State), Shell: r.Shell, Cwd: r.Cwd,
			Created: r.Created, LastUsed: r.LastUsed, Reason: r.Reason, Limits: limitsOf(r), Kind: string(store.KindOf(r))}
		if store.KindOf(r) == store.KindTerminal {
			out = append(out, d.termEntry(ctx, r, si))
			continue
		}
		d.mu.Lock()
		s, rcv := d.sessions[r.Name], d.recovering[r.Name]
		reason := ""
		if rcv != nil {
			reason = rcv.reason
		}
		d.mu.Unlock()
		switch {
		case rcv != nil: // neither up nor down yet: see recoverSession
			si.State, si.Reason = stateRecovering, reason
		case s != nil:
			// One read of the session's state: up with its shell and
			// that shell's cwd, or down, never half.
			st := s.State()
			si.State, si.Busy = string(store.Down), st.Busy
			si.BackgroundBytes = st.BackgroundBytes
			if st.Alive {
				si.State, si.ShellPid, si.Cwd = string(store.Up), st.Pid, st.Cwd
			}
			si.Limits = s.Limits()
			if u, ok := s.Usage(); ok {
				si.Usage = &u
			}
		case r.State == store.Up:
			si.State = string(store.Down) // recorded up, but not held: it is not
		}
		out = append(out, si)
	}
	return out, nil
}

// Kill ends sessions (their whole trees) and deletes their records and
// directories: names, or every session with all. It returns those it
// killed, up to the first it could not (a bad name is ErrBadRequest, one
// with no record ErrNotFound).
func (d *Daemon) Kill(ctx context.Context, p Peer, names []string, all bool) ([]string, error) {
	if err := d.authorizeChange(p, "kill sessions"); err != nil {
		d.cfg.Log.Warn("request refused", "peer", p.String(), "addr", p.Addr, "call", "kill", "err", err)
		return nil, err
	}
	if all {
		recs, err := d.store.List()
		if err != nil {
			return nil, err
		}
		names = nil
		for _, r := range recs {
			names = append(names, r.Name)
		}
	}
	var killed []string
	for _, name := range names {
		if err := store.CheckName(name); err != nil {
			return killed, badRequest(err)
		}
		if err := d.kill(name); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return killed, fmt.Errorf("session %s: %w", name, ErrNotFound)
			}
			return killed, err
		}
		killed = append(killed, name)
	}
	return killed, nil
}

func (d *Daemon) kill(name string) error {
	lock := d.nameLock(name)
	lock.Lock()
	defer lock.Unlock()
	rec, err := d.store.Get(name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	s := d.sessions[name]
	delete(d.sessions, name)
	delete(d.written, name)
	d.mu.Unlock()
	var errs []error
	if store.KindOf(rec) == store.KindTerminal {
		if err := d.killTerm(name, rec); err != nil {
			errs = append(errs, err)
		}
		rec.Tree = nil
	}
	if s != nil {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if rec.Tree != nil {
		// A tree that cannot be checked is left alone: only the record
		// goes (the user asked for that).
		session.Reap(rec.Tree.Identity)
	}
	os.RemoveAll(d.holdDir(name))
	if err := d.store.Delete(name); err != nil && !errors.Is(err, store.ErrNotFound) {
		errs = append(errs, err)
	}
	d.recoveredOne(name) // a take-over being retried ends here
	if err := errors.Join(errs...); err != nil {
		d.cfg.Log.Info("session killed", "session", name, "err", err)
	} else {
		d.cfg.Log.Info("session killed", "session", name)
	}
	return errors.Join(errs...)
}

// Status describes the daemon.
type Status struct {
	Pid      int
	StateDir string
	Sessions int
	Started  time.Time
	// Isolation is how the daemon contains the shells of the sessions it
	// creates and its oneshots (auto resolved); a session taken over from
	// an earlier daemon keeps its own.
	Isolation corral.Isolation
}

// Status describes the daemon.
func (d *Daemon) Status(ctx context.Context, p Peer) (Status, error) {
	if err := d.authorize(p); err != nil {
		return Status{}, err
	}
	n, _ := d.store.Count()
	iso := d.cfg.Isolation
	if iso == "" || iso == corral.IsolationAuto {
		iso = corral.BestIsolation() // what a new session's shell gets
	}
	return Status{Pid: os.Getpid(), StateDir: d.cfg.StateDir, Sessions: n, Started: d.started, Isolation: iso}, nil
}

// Stop asks the daemon to stop (StopRequested is closed); sessions and
// records stay.
func (d *Daemon) Stop(ctx context.Context, p Peer) error {
	if err := d.authorizeChange(p, "stop the daemon"); err != nil {
		d.cfg.Log.Warn("request refused", "peer", p.String(), "addr", p.Addr, "call", "stop", "err", err)
		return err
	}
	d.stopReq.Do(func() { close(d.stopped) })
	return nil
}

// Authorize refuses a peer that may not use this daemon (ErrPermission).
// Every method checks it too; a front-end calls it once per connection.
func (d *Daemon) Authorize(p Peer) error { return d.authorize(p) }
