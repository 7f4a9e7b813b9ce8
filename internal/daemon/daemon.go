// Package daemon is corral's daemon: the registry of named sessions, the
// gateway clients talk to, and the reaper of what crashed sessions left.
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
//	    corral.sock          the Daemon API (0600; other uids are refused)
//	    corral.db            session records
//	    daemon.pid
//	    sessions/<name>/     a held shell's FIFOs: ctl, out, err, in-* (0700)
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corral-dev/corral"
	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/fds"
	"github.com/corral-dev/corral/internal/record"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/unixsock"
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
	// SendStall bounds how long one message of a command's output may
	// wait for its client to read (0 means DefaultSendStall): past it the
	// daemon stops the command (grace, then kill), freeing its session's
	// turn, and logs it.
	SendStall time.Duration
}

// Daemon serves the Daemon API.
type Daemon struct {
	cfg     Config
	store   *store.Store
	runs    record.Store // records of oneshot trees
	lis     net.Listener
	srv     *grpc.Server
	started time.Time
	stopped chan struct{}
	once    sync.Once // shutdown
	stopReq sync.Once // closes stopped

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

	// recovered is closed when start-up recovery has been through every
	// record (some may still be retrying a take-over). endRecovery
	// cancels what is left of it; bg counts its goroutines, which
	// shutdown waits for.
	recovered   chan struct{}
	endRecovery context.CancelFunc
	bg          sync.WaitGroup

	// stopping ends when a stopping daemon's grace for commands is over:
	// oneshots, which no later daemon can take over, are cancelled then.
	stopping     context.Context
	stopOneshots context.CancelCauseFunc

	pb.UnimplementedDaemonServer
}

// stateRecovering is how List shows a session whose start-up recovery has
// not ended (its shell is being taken over or its tree reaped).
const stateRecovering = "recovering"

// SocketPath is where the daemon of stateDir listens.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, "corral.sock") }

// Open prepares a daemon: the store, the sessions' directory, the socket,
// and the take-over of live shells. Serve then answers clients.
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
		return nil, running(cfg.StateDir, err)
	}
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, store: st, runs: record.Store{Dir: runs}, started: time.Now(), stopped: make(chan struct{}),
		sessions: map[string]*session.Session{}, names: map[string]*sync.Mutex{}, written: map[string]written{},
		recovering: map[string]*recovery{}, recovered: make(chan struct{})}
	d.stopping, d.stopOneshots = context.WithCancelCause(context.Background())
	lis, err := unixsock.Listen(SocketPath(cfg.StateDir))
	if errors.Is(err, unixsock.ErrInUse) {
		err = running(cfg.StateDir, err)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	if lis, err = unixsock.OwnerOnly(lis); err != nil {
		lis.Close()
		st.Close()
		return nil, err
	}
	d.lis = limitConns(lis, maxConns)
	boundMemory()
	// The pid file names the owner of the socket from now on, before
	// recovery takes the descriptors and time it may need.
	if err := os.WriteFile(filepath.Join(cfg.StateDir, "daemon.pid"), []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600); err != nil {
		cfg.Log.Warn("cannot write the pid file", "err", err)
	}
	// Only the daemon that owns the socket takes shells over. Recovery
	// gets recoverBudget before the daemon serves; what is left of it
	// (a slow reap, a take-over to retry) goes on in the background, and
	// those sessions answer as recovering meanwhile.
	cfg.Log.Info("daemon starting", "pid", os.Getpid(), "state_dir", cfg.StateDir)
	d.limitSessionPids()
	d.startRecovery()
	select {
	case <-d.recovered:
	case <-time.After(recoverBudget):
		d.mu.Lock()
		n := len(d.recovering)
		d.mu.Unlock()
		cfg.Log.Info("serving while sessions are still being recovered", "recovering", n)
	}
	d.srv = grpc.NewServer(serverOptions()...)
	pb.RegisterDaemonServer(d.srv, d)
	return d, nil
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

func running(dir string, cause error) error {
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

// Serve answers clients until Stop is called or ctx ends. Sessions keep
// running after it returns.
func (d *Daemon) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- d.srv.Serve(d.lis) }()
	select {
	case <-ctx.Done():
	case <-d.stopped:
	case err := <-errc:
		d.shutdown()
		return err
	}
	d.shutdown()
	return nil
}

// stopBound is how long shutdown lets running commands finish before it
// lets their sessions go (the commands go on in their shells).
const stopBound = 5 * time.Second

// shutdown stops serving: it stops accepting, lets calls under way finish
// within stopBound, then lets every session go without stopping its shell
// (a command still running goes on; its caller gets an error), and
// releases the store. It kills nothing and purges no record.
func (d *Daemon) shutdown() {
	d.once.Do(func() {
		done := make(chan struct{})
		go func() { d.srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopBound):
			// Let go first: a call cut off now must not be taken as
			// its command's cancellation.
			d.detachAll()
			d.endOneshots()
			// Their handlers have returned; let the server flush what
			// they sent (each client learns what became of its command)
			// before cutting whatever is left.
			select {
			case <-done:
			case <-time.After(flushBound):
				d.srv.Stop()
			}
		}
		d.stopRecovery()
		d.detachAll()
		d.store.Close()
		os.Remove(filepath.Join(d.cfg.StateDir, "daemon.pid"))
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

// flushBound is how long a stopping daemon lets the last results reach
// their clients.
const flushBound = 2 * time.Second

// oneshotStopBound bounds endOneshots: a cancelled tree's grace, the
// bound on its kill, and its drain.
const oneshotStopBound = 20 * time.Second

func (d *Daemon) detachAll() {
	d.mu.Lock()
	d.closing = true
	ss := d.sessions
	d.sessions = map[string]*session.Session{}
	d.mu.Unlock()
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
			d.recoveredOne(name)
			d.bg.Add(1)
			go func() {
				defer d.bg.Done()
				d.recordTakeover(name, s)
			}()
			return false
		}
		if errors.Is(err, session.ErrNotOurs) {
			// Someone else's files stand where the shell's were:
			// nothing was sent through them, and the shell is left
			// alone (its record kept) until the next command or a
			// kill settles it through its identity.
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
	return status.Errorf(codes.FailedPrecondition, "session %s is still being recovered (%s); try again", name, reason)
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
		HoldDir: d.holdDir(name),
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

// sessionFor returns the session name, creating its record (from start's
// cwd and env) on first use. A session that is down gets its shell on its
// first command.
func (d *Daemon) sessionFor(name string, start *pb.ExecStart) (*session.Session, error) {
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
		return nil, status.Error(codes.Unavailable, "the daemon is stopping")
	}
	if s != nil && !s.Closed() {
		return s, nil
	}
	rec, err := d.store.Get(name)
	created := false
	if errors.Is(err, store.ErrNotFound) {
		// Refused before anything is written: a refused creation leaves
		// no record behind.
		if err := checkCreate(start.Cwd, start.Env); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		now := time.Now().UTC()
		rec = &store.Session{Name: name, Created: now, LastUsed: now, Shell: shellOf(start.Env),
			Cwd: start.Cwd, Env: start.Env, State: store.Down}
		if err := d.store.Put(rec); err != nil {
			return nil, err
		}
		created = true
	} else if err != nil {
		return nil, err
	}
	if rec.Tree != nil {
		if err := d.settle(name, rec.Tree); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "session %s is broken: %v (corral kill %s drops it)", name, err, name)
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

// Exec runs one command: in a oneshot shell, or in its session, creating
// the session on first use. The client's stream ending cancels it.
func (d *Daemon) Exec(stream pb.Daemon_ExecServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "the stream ended before its ExecStart")
	}
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first message must be an ExecStart")
	}
	if err := CheckStart(start); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if start.Oneshot {
		return d.serveExec(stream, start, d.runOnce(start), nil)
	}
	name := start.Session
	s, err := d.sessionFor(name, start)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.Internal, err.Error())
	}
	// The record follows the session's state as of this command, written
	// (and synced) before the client hears the result: what a client was
	// told must survive a crash, or the result says it was not saved.
	return d.serveExec(stream, start, func(ctx context.Context, opts session.Options) (*corral.Result, error) {
		return s.Exec(ctx, start.Command, opts)
	}, func() error { return d.recordState(name, s) })
}

// runOnce runs a --oneshot command in a fresh shell contained as sessions'
// shells are. No session can take its tree over, so it is recorded in
// runs/ as a corral run's tree is, owned by this daemon: if the daemon
// dies mid-command, the next one (or corral reap) kills what it left.
func (d *Daemon) runOnce(start *pb.ExecStart) func(context.Context, session.Options) (*corral.Result, error) {
	return func(ctx context.Context, opts session.Options) (*corral.Result, error) {
		d.mu.Lock()
		if !d.closing {
			d.oneshots.Add(1)
			defer d.oneshots.Done()
		} // else stopping has ended: it is cancelled before it starts
		d.mu.Unlock()
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(d.stopping, func() { cancel(context.Cause(d.stopping)) })()
		tracker := d.runs.Track([]string{"oneshot", start.Command})
		cfg := session.Config{Shell: shellOf(start.Env), Dir: start.Cwd, Env: start.Env, Isolation: d.cfg.Isolation,
			OnStart: tracker.OnStart}
		res, err := session.RunOnce(ctx, cfg, start.Command, opts)
		if errors.Is(context.Cause(ctx), errStopping) && res.Outcome == corral.OutcomeCancelled {
			res.Error = errStopping.Error() // the client is told why
		}
		if rerr := tracker.Done(res); rerr != nil {
			d.cfg.Log.Error("cannot remove a oneshot record", "err", rerr)
		}
		return res, err
	}
}

// reapRuns kills the recorded trees (oneshots of a daemon that died, corral
// runs that were killed) whose owner is gone, through their identity.
func (d *Daemon) reapRuns() {
	reaped, errs := record.Reap(d.runs, false)
	for _, r := range reaped {
		switch r.Action {
		case record.Killed:
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

// MaxCommand bounds the shell code of one command.
const MaxCommand = 1 << 20

// CheckStart validates an ExecStart from a client before anything is
// created or started.
func CheckStart(s *pb.ExecStart) error {
	switch {
	case s.TimeoutMs < 0:
		return errors.New("negative timeout")
	case s.MaxOutput < 0:
		return errors.New("negative output limit")
	case len(s.Command) > MaxCommand:
		return fmt.Errorf("command of %d bytes (at most %d)", len(s.Command), MaxCommand)
	case strings.IndexByte(s.Command, 0) >= 0:
		return errors.New("NUL byte in command")
	case s.Cwd != "" && !filepath.IsAbs(s.Cwd):
		return fmt.Errorf("cwd %q is not absolute", s.Cwd)
	case len(s.Cwd) >= maxPath:
		return fmt.Errorf("cwd of %d bytes (a path has at most %d)", len(s.Cwd), maxPath-1)
	case strings.IndexByte(s.Cwd, 0) >= 0:
		return errors.New("NUL byte in cwd")
	}
	for _, kv := range s.Env {
		if strings.IndexByte(kv, 0) >= 0 || !strings.Contains(kv, "=") {
			return fmt.Errorf("malformed environment entry %q", kv)
		}
	}
	if s.Oneshot {
		return nil
	}
	return store.CheckName(s.Session)
}

// List lists the sessions: their records from one consistent snapshot of
// the store, with the live state of the sessions this daemon holds.
func (d *Daemon) List(ctx context.Context, _ *pb.ListRequest) (*pb.ListResponse, error) {
	recs, err := d.store.List()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &pb.ListResponse{}
	for _, r := range recs {
		si := &pb.SessionInfo{Name: r.Name, State: string(r.State), Shell: r.Shell, Cwd: r.Cwd,
			CreatedUnix: r.Created.Unix(), LastUsedUnix: r.LastUsed.Unix(), Reason: r.Reason}
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
			if st.Alive {
				si.State, si.KeeperPid, si.Cwd = string(store.Up), int32(st.Pid), st.Cwd
			}
		case r.State == store.Up:
			si.State = string(store.Down) // recorded up, but not held: it is not
		}
		out.Sessions = append(out.Sessions, si)
	}
	return out, nil
}

// Kill ends sessions (their whole trees) and deletes their records and
// directories.
func (d *Daemon) Kill(ctx context.Context, req *pb.KillRequest) (*pb.KillResponse, error) {
	names := req.Names
	if req.All {
		recs, err := d.store.List()
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		names = nil
		for _, r := range recs {
			names = append(names, r.Name)
		}
	}
	out := &pb.KillResponse{}
	for _, name := range names {
		if err := store.CheckName(name); err != nil {
			return out, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := d.kill(name); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return out, status.Error(codes.NotFound, err.Error())
			}
			return out, status.Error(codes.Internal, err.Error())
		}
		out.Killed = append(out.Killed, name)
	}
	return out, nil
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
func (d *Daemon) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	n, _ := d.store.Count()
	iso := d.cfg.Isolation
	if iso == "" || iso == corral.IsolationAuto {
		iso = corral.BestIsolation() // what a new session's shell gets
	}
	return &pb.StatusResponse{Pid: int32(os.Getpid()), Socket: SocketPath(d.cfg.StateDir),
		StateDir: d.cfg.StateDir, Sessions: int32(n), StartedUnix: d.started.Unix(), Isolation: string(iso)}, nil
}

// Stop ends Serve after answering; sessions and records stay.
func (d *Daemon) Stop(ctx context.Context, _ *pb.StopRequest) (*pb.StopResponse, error) {
	d.stopReq.Do(func() { close(d.stopped) })
	return &pb.StopResponse{}, nil
}
