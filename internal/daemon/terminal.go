package daemon

// Terminal sessions: a program on a PTY held by a holder process of its
// own (package terminal), in the session's directory under the state
// directory. The daemon starts each holder as a contained tree whose
// identity is in the session's record before the holder runs, relays
// clients to it, and keeps the record (command, cwd, environment, size)
// so that a session found down after a reboot starts again as it was
// opened. The holder, not the daemon, holds the program and its screen:
// a daemon SIGKILL costs neither, and the next daemon takes the holder
// over through its recorded identity (recoverTerm).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/term"
	"github.com/corral-dev/corral/terminal"
)

// Size policies of a terminal session: whose size the window takes.
const (
	SizeTyped    = "typed"    // the most recent attached client that typed (default)
	SizeSmallest = "smallest" // the smallest of the attached clients
	SizeLargest  = "largest"  // the largest of the attached clients
	SizeFixed    = "fixed"    // only an explicit resize changes it
)

// termBound bounds the daemon's calls to a holder that are not waits.
const termBound = 10 * time.Second

// termReleaseBound bounds how long a stopping daemon waits for the
// watchers of the holders it lets go.
const termReleaseBound = 5 * time.Second

// terms is the daemon's registry of the terminal sessions whose holders
// it holds (started or taken over).
type terms struct {
	mu sync.Mutex // guards m; taken after Daemon.mu if both are
	m  map[string]*termSession
	wg sync.WaitGroup // the watchers
}

// termSession is one terminal session's live holder.
type termSession struct {
	name   string
	term   *terminal.Term
	tree   *corral.Tree  // the holder's tree; the watcher waits for it
	done   chan struct{} // closed when the holder's tree has settled (or was let go)
	policy string        // the size policy (fixed at the start)

	// mu guards the fields that follow; lock order: mu, then a
	// client's mu.
	mu         sync.Mutex
	cols, rows int
	clients    map[*TermClient]struct{}
	typed      *TermClient // the most recent client that typed
	released   bool
}

func (t *terms) get(name string) *termSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[name]
}

func (t *terms) put(ts *termSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*termSession{}
	}
	t.m[ts.name] = ts
}

// remove unregisters ts and reports whether it was registered.
func (t *terms) remove(ts *termSession) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[ts.name] != ts {
		return false
	}
	delete(t.m, ts.name)
	return true
}

// TermOpenRequest is what a terminal session is opened with.
type TermOpenRequest struct {
	Name string
	// Command is the program and its arguments (nil: the user's shell,
	// $SHELL of Env, else /bin/sh).
	Command []string
	// Cwd is the program's working directory (absolute; "": /); Env its
	// environment (a TERM=xterm-256color is added if it has none).
	Cwd string
	Env []string
	// Cols and Rows are the window's size (0: 80×24).
	Cols, Rows int
	// SizePolicy is one of the Size constants ("": SizeTyped).
	SizePolicy string
	// Existing makes a terminal session of that name that is open
	// already no error (attach): it is left as it is.
	Existing bool
}

// TermInfo says what TermOpen did.
type TermInfo struct {
	Name string
	// Created: the record is new; Started: a holder was started (new, or
	// a session that was down).
	Created, Started bool
	HolderPid        int
	Cols, Rows       int
	Command          []string
}

// checkTermOpen validates r before anything is written or started.
func checkTermOpen(r *TermOpenRequest) error {
	if err := store.CheckName(r.Name); err != nil {
		return err
	}
	for i, a := range r.Command {
		if i == 0 && a == "" {
			return errors.New("the command's program is empty")
		}
	}
	if r.Cwd != "" && !filepath.IsAbs(r.Cwd) {
		return fmt.Errorf("cwd %q is not an absolute path", r.Cwd)
	}
	if r.Cols != 0 || r.Rows != 0 {
		if err := term.CheckSize(r.Cols, r.Rows); err != nil {
			return fmt.Errorf("size %dx%d: %w", r.Cols, r.Rows, err)
		}
	}
	switch r.SizePolicy {
	case "", SizeTyped, SizeSmallest, SizeLargest, SizeFixed:
	default:
		return fmt.Errorf("size policy %q: want typed, smallest, largest or fixed", r.SizePolicy)
	}
	return nil
}

// TermOpen opens the terminal session req names: a new one (its record
// written, then its holder started, its identity recorded before it
// runs), or one that is down (its saved command started afresh in its
// saved cwd, environment and size: what req says of them is not used).
// A session that is open already is an error unless req.Existing (then
// it is left as it is).
func (d *Daemon) TermOpen(ctx context.Context, p Peer, req TermOpenRequest) (*TermInfo, error) {
	if err := d.authorizeChange(p, "open terminal sessions"); err != nil {
		return nil, err
	}
	if err := checkTermOpen(&req); err != nil {
		return nil, badRequest(fmt.Errorf("terminal session %s not opened: %w", req.Name, err))
	}
	if err := d.awaitRecovery(req.Name); err != nil {
		return nil, err
	}
	lock := d.nameLock(req.Name)
	lock.Lock()
	defer lock.Unlock()
	d.mu.Lock()
	closing := d.closing
	d.mu.Unlock()
	if closing {
		return nil, ErrStopping
	}
	rec, err := d.store.Get(req.Name)
	created := false
	switch {
	case errors.Is(err, store.ErrNotFound):
		if err := checkCreate(req.Cwd, req.Env); err != nil {
			return nil, badRequest(err)
		}
		cmd := req.Command
		if len(cmd) == 0 {
			cmd = []string{shellOf(req.Env)}
		}
		cols, rows := req.Cols, req.Rows
		if cols == 0 && rows == 0 {
			cols, rows = 80, 24
		}
		cwd := req.Cwd
		if cwd == "" {
			cwd = "/"
		}
		now := time.Now().UTC()
		rec = &store.Session{Name: req.Name, Created: now, LastUsed: now, Shell: cmd[0], Cwd: cwd, Env: termEnv(req.Env),
			State: store.Down, Kind: store.KindTerminal,
			Term: &store.Term{Command: cmd, Cols: cols, Rows: rows, SizePolicy: req.SizePolicy}}
		if err := d.store.Put(rec); err != nil {
			return nil, err
		}
		created = true
	case err != nil:
		return nil, err
	case store.KindOf(rec) != store.KindTerminal:
		return nil, badRequest(fmt.Errorf("session %s is an exec session, not a terminal session (pick another name, or corral kill %s first)", req.Name, req.Name))
	}
	if ts := d.terms.get(req.Name); ts != nil {
		if !req.Existing {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := ts.term.Status(sctx)
			cancel()
			if err == nil && st.Exited {
				return nil, badRequest(fmt.Errorf("terminal session %s: its program exited (status %d); its last screen is kept until corral kill %s, after which term open starts it again",
					req.Name, st.ExitCode, req.Name))
			}
			return nil, badRequest(fmt.Errorf("terminal session %s is open already (corral attach %s joins it; corral kill %s ends it)", req.Name, req.Name, req.Name))
		}
		ts.mu.Lock()
		cols, rows := ts.cols, ts.rows
		ts.mu.Unlock()
		return &TermInfo{Name: req.Name, HolderPid: ts.term.HolderPid(), Cols: cols, Rows: rows, Command: rec.Term.Command}, nil
	}
	if rec.Tree != nil {
		// Recorded, not held: whatever is left of it goes, through its
		// identity, before a new holder starts.
		if err := d.reapTerm(req.Name, rec); err != nil {
			return nil, fmt.Errorf("%w: terminal session %s is broken: %v (corral kill %s drops it)", ErrBroken, req.Name, err, req.Name)
		}
	}
	ts, err := d.startHolder(ctx, rec)
	if err != nil {
		if created {
			d.unmake(req.Name, true, err)
		}
		return nil, err
	}
	return &TermInfo{Name: req.Name, Created: created, Started: true, HolderPid: ts.term.HolderPid(),
		Cols: ts.cols, Rows: ts.rows, Command: rec.Term.Command}, nil
}

// termEnv is env with a TERM the screen model speaks if it has none.
func termEnv(env []string) []string {
	for _, kv := range env {
		if len(kv) >= 5 && kv[:5] == "TERM=" {
			return env
		}
	}
	return append(env[:len(env):len(env)], "TERM=xterm-256color")
}

// startHolder starts rec's holder in the session's directory (the
// caller holds the name's lock) and registers it.
func (d *Daemon) startHolder(ctx context.Context, rec *store.Session) (*termSession, error) {
	name := rec.Name
	dir, err := statedir.Ensure(d.cfg.StateDir, "sessions", name)
	if err != nil {
		return nil, err
	}
	cwd := rec.Cwd
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		d.cfg.Log.Warn("a terminal session's saved cwd is gone; its program starts in /", "session", name, "cwd", cwd)
		cwd = "/"
	}
	cmd := rec.Term.Command
	cfg := terminal.Config{Path: cmd[0], Args: cmd, Env: termEnv(rec.Env), Dir: cwd,
		Cols: rec.Term.Cols, Rows: rec.Term.Rows, Isolation: d.cfg.Isolation, HolderIsolation: d.cfg.Isolation,
		Holder: d.cfg.Holder,
		OnHolderStart: func(id corral.Identity) error {
			return d.store.Update(name, func(r *store.Session) error {
				r.Tree, r.State, r.Reason = &store.Shell{Identity: id}, store.Up, ""
				return nil
			})
		}}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tm, err := terminal.Open(ctx, dir, cfg)
	if err != nil {
		// The hook may have recorded a holder that is gone now.
		d.store.Update(name, func(r *store.Session) error { r.Tree, r.State = nil, store.Down; return nil })
		return nil, badRequest(fmt.Errorf("terminal session %s: %w", name, err))
	}
	tree := tm.HolderTree()
	if err := d.store.Update(name, func(r *store.Session) error {
		r.Term.Program, r.LastUsed = tm.Program(), time.Now().UTC()
		return nil
	}); err != nil {
		d.cfg.Log.Warn("cannot record a terminal program's tree", "session", name, "err", err)
	}
	d.cfg.Log.Info("terminal holder started", "session", name, "pid", tm.HolderPid(), "command", cmd[0])
	return d.holdTerm(name, tm, tree, rec.Term), nil
}

// holdTerm registers a live holder and starts its watcher.
func (d *Daemon) holdTerm(name string, tm *terminal.Term, tree *corral.Tree, t *store.Term) *termSession {
	ts := &termSession{name: name, term: tm, tree: tree, done: make(chan struct{}),
		policy: t.SizePolicy, cols: t.Cols, rows: t.Rows, clients: map[*TermClient]struct{}{}}
	if ts.policy == "" {
		ts.policy = SizeTyped
	}
	d.terms.put(ts)
	d.terms.wg.Add(1)
	go func() {
		defer d.terms.wg.Done()
		d.watchHolder(ts)
	}()
	return ts
}

// watchHolder waits for a holder's tree. One that ends while held (its
// session closed, or the holder died) makes the session down: what is
// left of its program is killed through the program's identity.
func (d *Daemon) watchHolder(ts *termSession) {
	ts.tree.Wait()
	close(ts.done)
	ts.mu.Lock()
	released := ts.released
	ts.mu.Unlock()
	if released {
		return
	}
	lock := d.nameLock(ts.name)
	lock.Lock()
	defer lock.Unlock()
	if !d.terms.remove(ts) { // a kill took it
		return
	}
	rec, err := d.store.Get(ts.name)
	if err != nil {
		return
	}
	if err := d.reapTerm(ts.name, rec); err != nil {
		d.cfg.Log.Warn("terminal session broken: its holder died and its program could not be reaped", "session", ts.name, "err", err)
		return
	}
	d.cfg.Log.Info("terminal holder gone; session down", "session", ts.name)
}

// reapTerm kills what is left of a recorded terminal session that is not
// held (its holder's tree, then its program's, each through its
// identity) and marks it down; if that fails it is broken.
func (d *Daemon) reapTerm(name string, rec *store.Session) error {
	var errs []error
	if rec.Tree != nil {
		errs = append(errs, killOrphan(rec.Tree.Identity))
	}
	if rec.Term != nil && rec.Term.Program != nil {
		errs = append(errs, killOrphan(*rec.Term.Program))
	}
	if err := errors.Join(errs...); err != nil {
		d.store.Update(name, func(r *store.Session) error {
			r.State, r.Reason = store.Broken, err.Error()
			return nil
		})
		return err
	}
	return d.store.Update(name, func(r *store.Session) error {
		r.State, r.Tree, r.Reason = store.Down, nil, ""
		if r.Term != nil {
			r.Term.Program = nil
		}
		return nil
	})
}

// killOrphan kills what is left of the tree id names; a tree that is
// gone is no error.
func killOrphan(id corral.Identity) error {
	o, err := corral.FindOrphan(id)
	if errors.Is(err, corral.ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	return o.Kill()
}

// recoverTerm takes over a recorded terminal session's holder after a
// restart: a live holder that its identity proves ours and that serves
// in the session's directory is adopted, its screen and program intact;
// a holder that is ours but does not serve there (an orphan) is killed
// through its identity; one that is gone leaves its session down (its
// program reaped too).
func (d *Daemon) recoverTerm(name string, rec *store.Session) {
	id := rec.Tree.Identity
	tree, err := (&corral.Cmd{}).Adopt(id)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), termBound)
		tm, derr := terminal.Dial(ctx, d.holdDir(name))
		cancel()
		if derr == nil && tm.HolderPid() == id.Pid {
			d.mu.Lock()
			closing := d.closing
			d.mu.Unlock()
			if closing {
				tree.Release()
				return
			}
			if rec.Term == nil {
				rec.Term = &store.Term{Cols: 80, Rows: 24}
			}
			ts := d.holdTerm(name, tm, tree, rec.Term)
			if scr, err := tm.Screen(context.Background(), terminal.ScreenOptions{}); err == nil {
				ts.mu.Lock()
				ts.cols, ts.rows = scr.Cols, scr.Rows
				ts.mu.Unlock()
			}
			d.store.Update(name, func(r *store.Session) error { r.State = store.Up; return nil })
			d.cfg.Log.Info("took over terminal holder", "session", name, "pid", id.Pid)
			return
		}
		if derr != nil && !notServing(derr) {
			// It may be fine (stopped, slow, its directory changed
			// under it): nothing is signalled on a doubt. The session is
			// broken until a kill, or an open that reaps it.
			tree.Release()
			reason := fmt.Sprintf("its holder %d is alive but cannot be reached: %v", id.Pid, derr)
			d.store.Update(name, func(r *store.Session) error { r.State, r.Reason = store.Broken, reason; return nil })
			d.cfg.Log.Warn("terminal session broken: refused to take over its holder", "session", name, "pid", id.Pid, "err", derr)
			return
		}
		if derr == nil {
			derr = fmt.Errorf("holder %d serves there, not the recorded %d", tm.HolderPid(), id.Pid)
		}
		d.cfg.Log.Warn("orphaned terminal holder: ours by its identity, but it does not serve its session; killed", "session", name, "pid", id.Pid, "err", derr)
		tree.Stop(-1)
		tree.Wait()
	} else if !errors.Is(err, contain.ErrGone) {
		d.cfg.Log.Info("cannot take over terminal holder", "session", name, "pid", id.Pid, "err", err)
	}
	if err := d.reapTerm(name, rec); err != nil {
		d.cfg.Log.Warn("terminal session broken", "session", name, "err", err)
		return
	}
	d.cfg.Log.Info("terminal session down", "session", name)
}

// notServing reports whether a Dial's error proves that no holder serves
// the session's directory: its socket is gone, or nothing listens on it.
func notServing(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// killTerm ends a terminal session's whole tree (the caller holds the
// name's lock and deletes the record): the holder is asked to close
// (the program gets SIGTERM, its grace, then SIGKILL), its tree is then
// stopped and waited for, and what its record names is reaped.
func (d *Daemon) killTerm(name string, rec *store.Session) error {
	var errs []error
	if ts := d.terms.get(name); ts != nil {
		d.terms.remove(ts)
		ctx, cancel := context.WithTimeout(context.Background(), 2*termBound)
		ts.term.Close(ctx)
		cancel()
		ts.tree.Stop(0)
		<-ts.done
	}
	if rec.Tree != nil {
		errs = append(errs, killOrphan(rec.Tree.Identity))
	}
	if rec.Term != nil && rec.Term.Program != nil {
		errs = append(errs, killOrphan(*rec.Term.Program))
	}
	return errors.Join(errs...)
}

// releaseTerms lets every held holder go on without this daemon (it is
// stopping; the next one takes them over).
func (d *Daemon) releaseTerms() {
	d.terms.mu.Lock()
	all := d.terms.m
	d.terms.m = nil
	d.terms.mu.Unlock()
	for _, ts := range all {
		ts.mu.Lock()
		ts.released = true
		ts.mu.Unlock()
		ts.tree.Release()
	}
	done := make(chan struct{})
	go func() { d.terms.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(termReleaseBound):
		d.cfg.Log.Error("terminal holders' watchers still running at stop")
	}
}

// errTermDown is the class of a call to a terminal session that has no
// holder: it is down (a reboot, its holder died); opening it again
// starts its program afresh.
var errTermDown = errors.New("terminal session is down")

// heldTerm returns name's live holder, or an error that says why there
// is none.
func (d *Daemon) heldTerm(name string) (*termSession, error) {
	if err := store.CheckName(name); err != nil {
		return nil, badRequest(err)
	}
	if err := d.awaitRecovery(name); err != nil {
		return nil, err
	}
	if ts := d.terms.get(name); ts != nil {
		return ts, nil
	}
	rec, err := d.store.Get(name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("terminal session %s: %w (corral term open %s starts one)", name, ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	if store.KindOf(rec) != store.KindTerminal {
		return nil, badRequest(fmt.Errorf("session %s is an exec session, not a terminal session (use corral exec -s %s)", name, name))
	}
	if rec.State == store.Broken {
		return nil, fmt.Errorf("%w: terminal session %s: %s (corral kill %s drops it)", ErrBroken, name, rec.Reason, name)
	}
	return nil, badRequest(fmt.Errorf("%w: %s (its program is not running: a reboot, or its holder died); corral term open %s or corral attach %s starts it again in %s",
		errTermDown, name, name, name, rec.Cwd))
}

// termErr classes an error of a holder call.
func termErr(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, terminal.ErrGone):
		return fmt.Errorf("terminal session %s: %w: %v", name, ErrSessionClosed, err)
	case errors.Is(err, terminal.ErrHolder):
		return badRequest(err)
	}
	return err
}

// TermSend writes data, then the keys named (tmux's notation: see
// terminal.Keys), to a terminal session's program as typed input; the
// cursor keys are sent as the program's cursor-key mode asks.
func (d *Daemon) TermSend(ctx context.Context, p Peer, name string, data []byte, keys []string) error {
	if err := d.authorizeChange(p, "send input to terminal sessions"); err != nil {
		return err
	}
	if _, err := terminal.Keys(keys...); err != nil {
		return badRequest(err)
	}
	ts, err := d.heldTerm(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, termBound)
	defer cancel()
	if len(keys) > 0 {
		scr, err := ts.term.Screen(ctx, terminal.ScreenOptions{})
		if err != nil {
			return termErr(name, err)
		}
		b, _ := terminal.KeysFor(scr.AppCursor, keys...)
		data = append(data[:len(data):len(data)], b...)
	}
	return termErr(name, ts.term.Send(ctx, data))
}

// TermScreen returns a terminal session's current screen.
func (d *Daemon) TermScreen(ctx context.Context, p Peer, name string, o terminal.ScreenOptions) (*terminal.Screen, error) {
	if err := d.authorize(p); err != nil {
		return nil, err
	}
	ts, err := d.heldTerm(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, termBound)
	defer cancel()
	s, err := ts.term.Screen(ctx, o)
	return s, termErr(name, err)
}

// MaxTermWait bounds one wait.
const MaxTermWait = 24 * time.Hour

// TermWait waits as o says (a timeout is no error: its Reason says so).
func (d *Daemon) TermWait(ctx context.Context, p Peer, name string, o terminal.WaitOptions) (*terminal.WaitResult, error) {
	if err := d.authorize(p); err != nil {
		return nil, err
	}
	if o.Text != "" {
		if _, err := regexp.Compile("(?m)" + o.Text); err != nil {
			return nil, badRequest(fmt.Errorf("wait: the text pattern: %v", err))
		}
	}
	if o.Text == "" && o.Idle <= 0 && !o.Exit {
		return nil, badRequest(errors.New("wait: give what to wait for: text, idle or exit"))
	}
	if o.Timeout < 0 || o.Idle < 0 {
		return nil, badRequest(errors.New("wait: timeout and idle must not be negative"))
	}
	if o.Timeout == 0 || o.Timeout > MaxTermWait {
		o.Timeout = MaxTermWait
	}
	ts, err := d.heldTerm(name)
	if err != nil {
		return nil, err
	}
	r, err := ts.term.Wait(ctx, o)
	return r, termErr(name, err)
}

// TermResize sets a terminal session's window size (and records it).
func (d *Daemon) TermResize(ctx context.Context, p Peer, name string, cols, rows int) error {
	if err := d.authorizeChange(p, "resize terminal sessions"); err != nil {
		return err
	}
	if err := term.CheckSize(cols, rows); err != nil {
		return badRequest(fmt.Errorf("size %dx%d: %w", cols, rows, err))
	}
	ts, err := d.heldTerm(name)
	if err != nil {
		return err
	}
	return d.resizeTerm(ctx, ts, cols, rows)
}

func (d *Daemon) resizeTerm(ctx context.Context, ts *termSession, cols, rows int) error {
	ts.mu.Lock()
	same := ts.cols == cols && ts.rows == rows
	ts.mu.Unlock()
	if same {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, termBound)
	defer cancel()
	if err := ts.term.Resize(ctx, cols, rows); err != nil {
		return termErr(ts.name, err)
	}
	ts.mu.Lock()
	ts.cols, ts.rows = cols, rows
	ts.mu.Unlock()
	return d.store.Update(ts.name, func(r *store.Session) error {
		if r.Term != nil {
			r.Term.Cols, r.Term.Rows = cols, rows
		}
		return nil
	})
}

// TermListInfo is what List adds for a terminal session.
type TermListInfo struct {
	Command    []string
	Cols, Rows int
	SizePolicy string
	HolderPid  int
	// ProgramPid is the program's pid while it runs; Exited and
	// ExitCode say how it ended (the holder keeps its last screen until
	// the session is killed).
	ProgramPid int
	Exited     bool
	ExitCode   int
}

// termEntry is List's entry for the terminal session of record r.
func (d *Daemon) termEntry(ctx context.Context, r *store.Session, si SessionInfo) SessionInfo {
	d.mu.Lock()
	if rcv := d.recovering[r.Name]; rcv != nil {
		si.State, si.Reason = stateRecovering, rcv.reason
	}
	d.mu.Unlock()
	d.termListInfo(ctx, r, &si)
	return si
}

// termListInfo fills si for the terminal session of record r.
func (d *Daemon) termListInfo(ctx context.Context, r *store.Session, si *SessionInfo) {
	ti := &TermListInfo{}
	if r.Term != nil {
		ti.Command, ti.Cols, ti.Rows, ti.SizePolicy = r.Term.Command, r.Term.Cols, r.Term.Rows, r.Term.SizePolicy
	}
	si.Term = ti
	if si.State == stateRecovering {
		return
	}
	ts := d.terms.get(r.Name)
	if ts == nil {
		if r.State == store.Up {
			si.State = string(store.Down) // recorded up, but not held: it is not
		}
		return
	}
	si.State = string(store.Up)
	ti.HolderPid = ts.term.HolderPid()
	ts.mu.Lock()
	ti.Cols, ti.Rows = ts.cols, ts.rows
	ts.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if st, err := ts.term.Status(ctx); err == nil {
		if st.Exited {
			si.State = "exited"
			ti.Exited, ti.ExitCode = true, st.ExitCode
		} else {
			ti.ProgramPid = st.Tree.Pid
			si.ShellPid = st.Tree.Pid
		}
	}
}

// TermAttachRequest says how a client attaches.
type TermAttachRequest struct {
	Name string
	// Cols and Rows are the client's terminal size (0: it has none to
	// give, the window keeps its size).
	Cols, Rows int
	// ReadOnly: the client's input and size are not used (a read-only
	// peer always attaches so).
	ReadOnly bool
	// Scrollback is how many scrollback rows the redraw starts with.
	Scrollback int
}

// TermClient is one client attached through the daemon: Read gives the
// bytes for its terminal (a redraw first), Write its input, Resize its
// terminal's size; the session's size policy decides what the window
// takes. Read is for one goroutine; the rest may be called from any.
type TermClient struct {
	d          *Daemon
	ts         *termSession
	a          *terminal.Attachment
	readOnly   bool
	mu         sync.Mutex // guards cols, rows
	cols, rows int
	closeOnce  sync.Once
}

// TermAttach attaches a client to a live terminal session.
func (d *Daemon) TermAttach(ctx context.Context, p Peer, req TermAttachRequest) (*TermClient, error) {
	if err := d.authorize(p); err != nil {
		return nil, err
	}
	if req.Cols != 0 || req.Rows != 0 {
		if err := term.CheckSize(req.Cols, req.Rows); err != nil {
			return nil, badRequest(fmt.Errorf("size %dx%d: %w", req.Cols, req.Rows, err))
		}
	}
	ts, err := d.heldTerm(req.Name)
	if err != nil {
		return nil, err
	}
	c := &TermClient{d: d, ts: ts, readOnly: req.ReadOnly || p.ReadOnly, cols: req.Cols, rows: req.Rows}
	if c.readOnly {
		c.cols, c.rows = 0, 0
	}
	ts.mu.Lock()
	ts.clients[c] = struct{}{}
	if ts.policy == SizeTyped && c.cols != 0 {
		ts.typed = c // a client that attaches is the latest until another types
	}
	ts.mu.Unlock()
	d.applyPolicy(ctx, ts)
	ctx, cancel := context.WithTimeout(ctx, termBound)
	defer cancel()
	a, err := ts.term.Attach(ctx, terminal.AttachOptions{Scrollback: req.Scrollback})
	if err != nil {
		c.drop()
		return nil, termErr(req.Name, err)
	}
	c.a = a
	return c, nil
}

// wantSize is the window size ts's policy asks for now (0, 0: leave it).
func (ts *termSession) wantSize() (int, int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch ts.policy {
	case SizeFixed:
		return 0, 0
	case SizeSmallest, SizeLargest:
		cols, rows := 0, 0
		for c := range ts.clients {
			c.mu.Lock()
			cc, cr := c.cols, c.rows
			c.mu.Unlock()
			if cc == 0 {
				continue
			}
			if cols == 0 || ts.policy == SizeSmallest && cc < cols || ts.policy == SizeLargest && cc > cols {
				cols = cc
			}
			if rows == 0 || ts.policy == SizeSmallest && cr < rows || ts.policy == SizeLargest && cr > rows {
				rows = cr
			}
		}
		return cols, rows
	}
	if c := ts.typed; c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.cols, c.rows
	}
	return 0, 0
}

// applyPolicy resizes the window to what the policy asks for.
func (d *Daemon) applyPolicy(ctx context.Context, ts *termSession) {
	if cols, rows := ts.wantSize(); cols != 0 && rows != 0 {
		if err := d.resizeTerm(ctx, ts, cols, rows); err != nil {
			d.cfg.Log.Debug("resize by policy failed", "session", ts.name, "err", err)
		}
	}
}

// Read reads output for the client's terminal; it ends with io.EOF once
// the program has exited, or terminal.ErrDetached after a detach.
func (c *TermClient) Read(p []byte) (int, error) { return c.a.Read(p) }

// Write sends the client's input (dropped for a read-only client). Under
// the typed policy a client that types takes the window to its size
// first.
func (c *TermClient) Write(p []byte) (int, error) {
	if c.readOnly {
		return len(p), nil
	}
	ts := c.ts
	ts.mu.Lock()
	c.mu.Lock()
	changed := ts.policy == SizeTyped && ts.typed != c && c.cols != 0
	c.mu.Unlock()
	if changed {
		ts.typed = c
	}
	ts.mu.Unlock()
	if changed {
		c.d.applyPolicy(context.Background(), ts)
	}
	return c.a.Write(p)
}

// Resize says the client's terminal has a new size.
func (c *TermClient) Resize(cols, rows int) error {
	if c.readOnly {
		return nil
	}
	if err := term.CheckSize(cols, rows); err != nil {
		return badRequest(err)
	}
	c.mu.Lock()
	c.cols, c.rows = cols, rows
	c.mu.Unlock()
	c.d.applyPolicy(context.Background(), c.ts)
	return nil
}

// HolderPid is the pid of the session's holder.
func (c *TermClient) HolderPid() int { return c.ts.term.HolderPid() }

// Size is the session's window size now.
func (c *TermClient) Size() (cols, rows int) {
	c.ts.mu.Lock()
	defer c.ts.mu.Unlock()
	return c.ts.cols, c.ts.rows
}

// Detach asks to detach: Read then gives the reset bytes and ends.
func (c *TermClient) Detach() error { return c.a.Detach() }

// Exit is the program's status once Read has returned io.EOF.
func (c *TermClient) Exit() *terminal.Status { return c.a.Exit() }

// Resyncs counts the times this client fell behind and was redrawn.
func (c *TermClient) Resyncs() int { return c.a.Resyncs() }

// Close ends the attachment (the program goes on) and lets the size
// policy forget the client.
func (c *TermClient) Close() error {
	c.drop()
	if c.a != nil {
		return c.a.Close()
	}
	return nil
}

func (c *TermClient) drop() {
	c.closeOnce.Do(func() {
		ts := c.ts
		ts.mu.Lock()
		delete(ts.clients, c)
		if ts.typed == c {
			ts.typed = nil
		}
		ts.mu.Unlock()
		if ts.policy == SizeSmallest || ts.policy == SizeLargest {
			c.d.applyPolicy(context.Background(), ts)
		}
	})
}
