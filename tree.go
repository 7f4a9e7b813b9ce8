package corral

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-dev/corral/internal/contain"
)

// Tree is a running command's contained process tree, from Cmd.Start or
// Adopt. It is modelled on os/exec's Cmd after Start: the Tree owns the
// tree's processes, its containment (cgroup, group, job) and the reading
// ends of its stdout and stderr; the caller owns the Cmd's writers and
// reader, which the Tree uses until Wait returns.
//
// From Start on, a supervisor of the Tree's own watches the tree: it
// relays the output, stops the tree when the context ends, the output
// limit is hit or Stop is called, settles the descendants by policy when
// the root exits, drains the output and releases everything. Wait returns
// its result. The tree's resources are released once it has settled,
// whether or not Wait is called; the result is only learnt through Wait.
//
// Wait, Stop, Identity and Exited may be called from any goroutine, at
// the same time. The Cmd must not be changed after Start.
type Tree struct {
	c      *Cmd
	ctx    context.Context
	cancel context.CancelFunc
	tree   contain.Tree
	ident  Identity
	rl     *relay
	stdin  *os.File
	// sizeDone is closed when the follower of an OutputTTY's size has
	// ended (nil: none runs).
	sizeDone chan struct{}
	res      *Result
	err      error
	done     chan struct{} // closed once res and err are final

	// stopReq is closed by the first Stop; kill when a Stop's grace ran
	// out (or at once, for a negative grace).
	stopReq chan struct{}
	kill    chan struct{}
	// release is closed by the first Release.
	release     chan struct{}
	releaseOnce sync.Once
	// stopMu guards the fields that follow.
	stopMu    sync.Mutex
	stopGrace time.Duration
	stopSig   os.Signal       // of the first Stop; nil: the Cmd's
	stopEsc   <-chan struct{} // of the first Stop; nil: none
	stopAsked bool
	killed    bool
	killAt    time.Time
	killTimer *time.Timer

	// acctMu guards the fields that follow: the accounting files of a
	// tree measured command by command (Measure), opened on first use and
	// closed when the tree settles.
	acctMu     sync.Mutex
	acct       *contain.Counter
	acctMiss   string // why acct could not be opened
	acctErr    error
	acctClosed bool
}

// Start starts the command and returns its Tree; the caller must call
// Wait (once, as for os/exec) to learn how it ended. When Start returns,
// the root has been started contained, OnStart has returned nil, and the
// relay of its output is running.
//
// If the command cannot start, Start returns a nil Tree and a *RunError
// whose Result has outcome start_failed (or cancelled, if ctx had already
// ended: nothing ran then) and says why; nothing of the command runs.
//
// ctx (and Timeout, counted from the call of Start) bound the run: if ctx ends before
// the tree has settled, the tree is stopped as by Stop(Grace), and the
// outcome is cancelled or timeout (see OutcomeOf). Ending ctx after the
// tree has settled has no effect.
func (c *Cmd) Start(ctx context.Context) (*Tree, error) {
	res := NewResult(Identity{})
	if ctx.Err() != nil {
		_, err := NotStarted(ctx, res, "cancelled before start: nothing ran")
		return nil, err
	}
	// Timeout counts from here, start included (an OnStart that hangs
	// runs into it too), as it always has for Run.
	var cancel context.CancelFunc = func() {}
	if c.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
	}
	fail := func(err error) (*Tree, error) {
		cancel()
		_, rerr := StartFailed(res, classifyStart(err))
		return nil, rerr
	}
	path, err := c.lookPath()
	if err != nil {
		return fail(err)
	}
	iso := contain.Isolation(c.Isolation)
	if iso == contain.Auto || iso == "" {
		iso = contain.Best()
	}

	// Pipes: the child's ends are closed here once it has started. A
	// stream the caller gave a file for gets that file, and no pipe.
	var outR, outW, errR, errW *os.File
	var ptyMaster *os.File
	if c.StdoutFile == nil && c.OutputTTY != nil {
		if m, s, err := openOutputPTY(c.OutputTTY); err == nil {
			outR, outW, ptyMaster = m, s, m
		}
	}
	if c.StdoutFile == nil && outR == nil {
		if outR, outW, err = os.Pipe(); err != nil {
			return fail(err)
		}
		growPipe(outW)
	}
	merged := c.StdoutFile == nil && c.StderrFile == nil && SameWriter(c.Stdout, c.Stderr)
	if merged {
		// Both streams go to one writer: one pipe, so what the command
		// wrote arrives in the order it wrote it (two pipes read by two
		// goroutines cannot keep that order). All of it counts as stdout.
		errW = outW
	} else if c.StderrFile == nil {
		if errR, errW, err = os.Pipe(); err != nil {
			closeAll(outR, outW)
			return fail(err)
		}
		growPipe(errW)
	}
	stdin, stdinDone, err := c.stdinFile()
	if err != nil {
		closeAll(outR, outW, errR, errW)
		return fail(err)
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	env = dedupEnv(env)
	spec := &contain.Spec{
		Path:       path,
		Argv:       c.Args,
		Env:        env,
		Dir:        c.Dir,
		Files:      append([]*os.File{stdin, or(c.StdoutFile, outW), or(c.StderrFile, errW)}, c.ExtraFiles...),
		Marker:     MarkerEnv + "=" + newID(),
		Foreground: c.Foreground,
		Setsid:     c.Setsid,
		Limits:     c.limits(),
	}
	if len(spec.Argv) == 0 {
		spec.Argv = []string{c.Path}
	}
	if c.OnStart != nil {
		spec.Hold = func(ci contain.Identity) error { return c.OnStart(identityOf(ci)) }
	}
	res.StartedAt = time.Now()
	ct, err := contain.Start(iso, spec)
	if err != nil && isENOEXEC(err) {
		// A file the kernel cannot execute (a script without "#!"): run
		// it with /bin/sh, as POSIX execvp does and as timeout, env and
		// xargs therefore do. Nothing ran, so it is safe to start again.
		spec.Path = "/bin/sh"
		spec.Argv = append([]string{"sh", path}, spec.Argv[1:]...)
		ct, err = contain.Start(iso, spec)
	}
	if merged {
		errW = nil // the same file as outW
	}
	closeAll(outW, errW)
	stdinDone(ct != nil)
	if err != nil {
		closeAll(outR, errR)
		res.StartedAt = time.Time{}
		return fail(err)
	}
	t := newTree(c, ctx, cancel, ct, res.StartedAt)
	t.stdin = stdin
	var sizeMaster *os.File
	if ptyMaster != nil && c.OutputTTYResize != nil {
		// A descriptor of its own: the relay closes ptyMaster at end of
		// file, whatever the follower is doing.
		sizeMaster, _ = dupFile(ptyMaster)
	}
	t.rl = newRelay(res.StartedAt, c.MaxOutput, outR, errR, c.Stdout, c.Stderr)
	if sizeMaster != nil {
		// It follows the size while there is output to relay; supervise
		// waits for it before the tree counts as settled.
		t.sizeDone = make(chan struct{})
		go followSize(sizeMaster, c.OutputTTY, c.OutputTTYResize, t.rl.done, t.sizeDone)
	}
	go t.supervise()
	return t, nil
}

// Adopt takes over a recorded tree whose root is still running and whose
// owner is gone (a corral that crashed or was killed): the result is a
// Tree like one from Start, but every signal goes through the identity
// gate (the root's pid and start time under the same boot, the tree's
// cgroup or group and marker), so nothing that the identity does not prove
// to be part of the tree is ever signalled.
//
// Its output is not ours (whoever held the pipes is gone), so the result
// counts none; the root is not our child, so how it exited is unknown: a
// root that exits by itself has outcome exited with ExitCode -1. Its
// StartedAt is the time of the adoption. When the root has exited, what
// is left of the tree is killed, as with KillDescendants; Stop stops it
// as for a started tree. The caller must call Wait.
//
// Adopt returns an error wrapping ErrGone when the recorded root is not
// running (also when its pid now names another process: a reused pid is
// refused), ErrNotOurs when the recorded pid, start time and boot name a
// running process that is not proved to be the root of a tree corral
// started (under cgroup it is not in the recorded cgroup; under pgroup it
// lacks the tree's marker in its environment; or the recorded marker is
// not one corral makes), and ErrUnsupported where trees cannot be found
// again (see contain.CanAdopt: Linux only). Nothing is signalled then.
func Adopt(id Identity) (*Tree, error) { return (&Cmd{}).Adopt(id) }

// Adopt is the package's Adopt for a tree to be handled as c says: its
// Grace, StopSignal, Escalate and Drain apply as for a tree c started (the
// policy for descendants is always KillDescendants). Of c only these are
// used; c must not be changed afterwards.
func (c *Cmd) Adopt(id Identity) (*Tree, error) {
	ct, err := contain.AdoptLive(id.contain())
	if err != nil {
		return nil, err
	}
	ac := &Cmd{Grace: c.Grace, StopSignal: c.StopSignal, Escalate: c.Escalate, Drain: c.Drain}
	t := newTree(ac, context.Background(), func() {}, ct, time.Now())
	t.rl = newRelay(t.res.StartedAt, 0, nil, nil, nil, nil)
	go t.supervise()
	return t, nil
}

func newTree(c *Cmd, ctx context.Context, cancel context.CancelFunc, ct contain.Tree, startedAt time.Time) *Tree {
	t := &Tree{
		c: c, ctx: ctx, cancel: cancel, tree: ct, ident: identityOf(ct.Identity()),
		done: make(chan struct{}), stopReq: make(chan struct{}), kill: make(chan struct{}),
		release: make(chan struct{}),
	}
	t.res = NewResult(t.ident)
	t.res.StartedAt = startedAt
	return t
}

// Identity is the tree's durable identity, the one OnStart was given.
func (t *Tree) Identity() Identity { return t.ident }

// Exited is closed when the root has exited (the rest of the tree may
// still be running: Wait says when it has settled).
func (t *Tree) Exited() <-chan struct{} { return t.tree.Exited() }

// Wait waits until the tree is gone (or released, under KeepDetached) and
// its output drained, and returns the result, which is never nil and is
// final. The error is nil only if the root exited 0 and no lifecycle
// failure occurred; otherwise it is a *RunError carrying the result, whose
// Err is the lifecycle failure if there was one (it wins), else the cause
// of a stop: context.Cause of ctx, or ErrStopped after Stop (nil for the
// output limit).
//
// Wait must be called once for every Tree; calling it again returns the
// same result and error. After Stop, Wait returns at once.
func (t *Tree) Wait() (*Result, error) {
	<-t.done
	return t.res, t.err
}

// Stop stops the tree if it is still running: SIGTERM to every process,
// then SIGKILL once grace has passed (a negative grace: SIGKILL at once,
// no SIGTERM). It returns when the tree has settled and Wait's result is
// final, whatever Stop's grace: a kill that cannot be confirmed is
// reported by Wait (KillFailed), not here.
//
// If the root is still running, the outcome is cancelled and Wait's error
// has cause ErrStopped (unless ctx ended or the output limit was hit
// first: the first reason to stop wins). If the root has already exited,
// the outcome stays the root's own; descendants still being stopped are
// killed once grace has passed, and under KeepDetached the wait for them
// to let go of stdout and stderr ends (those still holding them are
// killed and listed in StdioHeldBy, the others released, as after the
// drain bound).
//
// Stop may be called any number of times, from any goroutine, also
// concurrently with Wait and after it: the first call's grace applies
// unless a later call's grace runs out sooner. After the tree settled it
// does nothing. It must not be called from the Cmd's Stdout or Stderr
// writers or OnStart (it would wait for itself).
func (t *Tree) Stop(grace time.Duration) { t.StopWith(nil, grace, nil) }

// StopWith is Stop with sig as the first signal in place of the Cmd's
// StopSignal (nil: that one), and a grace period that also ends when
// escalate is closed (nil: only the Cmd's Escalate ends it early). A
// session stops its shell's tree for a cancelled command so, with the
// signal and escalation of that command. Only the first call's sig and
// escalate are used.
func (t *Tree) StopWith(sig os.Signal, grace time.Duration, escalate <-chan struct{}) {
	t.stopMu.Lock()
	if !t.stopAsked {
		t.stopAsked = true
		t.stopGrace, t.stopSig, t.stopEsc = grace, sig, escalate
		close(t.stopReq)
	}
	switch {
	case t.killed:
	case grace < 0:
		t.killLocked()
	default:
		at := time.Now().Add(grace)
		if t.killAt.IsZero() || at.Before(t.killAt) {
			t.killAt = at
			if t.killTimer != nil {
				t.killTimer.Stop()
			}
			t.killTimer = time.AfterFunc(grace, func() {
				t.stopMu.Lock()
				t.killLocked()
				t.stopMu.Unlock()
			})
		}
	}
	t.stopMu.Unlock()
	<-t.done
}

// Release lets the tree go on without this Tree, for an owner that is
// about to exit and leaves the tree to a later one (a held shell, which
// another process takes over with Adopt): nothing is signalled, the
// supervisor stops watching, and Wait returns at once with outcome
// cancelled and an error wrapping ErrReleased. What the tree's
// containment holds in this process (a pidfd, the unreaped root once it
// exits) is kept until this process exits. A tree whose root has
// already exited is not released: it settles as usual, and Release
// returns once it has. Like Stop, Release returns when Wait's result is
// final, and does nothing after the tree settled.
func (t *Tree) Release() {
	t.releaseOnce.Do(func() { close(t.release) })
	<-t.done
}

func (t *Tree) killLocked() {
	if !t.killed {
		t.killed = true
		close(t.kill)
	}
}

// supervise runs the tree's life from its start to its settling and makes
// the result; it is the only goroutine that calls the contain.Tree's
// methods other than Identity and Exited.
func (t *Tree) supervise() {
	defer close(t.done)
	defer func() {
		if t.sizeDone != nil {
			<-t.sizeDone
		}
	}()
	defer func() {
		t.stopMu.Lock()
		if t.killTimer != nil {
			t.killTimer.Stop()
		}
		t.stopMu.Unlock()
	}()
	defer t.cancel()
	c, ctx, tree, rl, res := t.c, t.ctx, t.tree, t.rl, t.res
	var lifecycle []error
	var stopped Outcome // why corral stopped the tree before its root exited
	var cause error

	select {
	case <-tree.Exited():
	case <-t.release:
		select {
		case <-tree.Exited(): // too late: it settles as usual
		default:
			res.Outcome = OutcomeCancelled
			res.EndedAt = time.Now()
			res.Duration = res.EndedAt.Sub(res.StartedAt)
			res.Error = "released: the tree goes on without its owner"
			t.res, t.err = res, &RunError{Result: res, Err: ErrReleased}
			return
		}
	case <-ctx.Done():
		stopped, cause = OutcomeOf(ctx), context.Cause(ctx)
	case <-rl.limitHit:
		stopped = OutcomeOutputLimit
	case <-t.stopReq:
		stopped, cause = OutcomeCancelled, ErrStopped
	}
	if stopped != "" {
		grace, sig := c.grace(), c.stopSignal(ctx, stopped)
		var userEsc <-chan struct{}
		switch {
		case stopped == OutcomeOutputLimit:
			grace = -1 // a flood gains nothing from a grace period
		case cause == ErrStopped:
			t.stopMu.Lock()
			grace, userEsc = t.stopGrace, t.stopEsc
			if s, ok := t.stopSig.(syscall.Signal); ok {
				sig = s
			}
			t.stopMu.Unlock()
		}
		esc, stop := escalation(userEsc, nil, c.Escalate, t.kill)
		pids, err := stopTreeWith(tree, sig, grace, esc)
		if err != nil {
			res.KillFailed = true
			lifecycle = append(lifecycle, err)
		}
		stop()
		res.ProcessesStopped = len(pids)
		res.DescendantsKilled = len(without(pids, []int{t.ident.Pid}))
		<-tree.Exited()
	} else if err := t.settleDescendants(); err != nil {
		res.KillFailed = true
		lifecycle = append(lifecycle, err)
	}

	// Drain what is left in the pipes. Every process of the tree is gone
	// or released by now, so this waits only for data in flight, or for a
	// process that escaped the tree (which the bound cuts off). While the
	// pipes stay held, the tree is looked at again: a descendant that was
	// in flight when it was last listed is stopped too.
	if !c.drainOutput(tree, rl, res, stopped != "" || c.Descendants == KillDescendants) {
		res.DrainCutOff = true
		lifecycle = append(lifecycle, ErrDrainCutOff)
	}
	account(res, tree, t.ident.Isolation)
	t.closeCounter()
	if err := tree.Close(); err != nil {
		lifecycle = append(lifecycle, err)
	}
	if c.Foreground {
		if err := contain.ReclaimTerminal(t.stdin); err != nil {
			lifecycle = append(lifecycle, fmt.Errorf("take back the terminal: %w", err))
		}
	}
	res.EndedAt = time.Now()
	res.Duration = res.EndedAt.Sub(res.StartedAt)
	res.FirstOutput = rl.firstOutput()
	res.StdoutBytes = rl.m.Bytes(0)
	res.StderrBytes = rl.m.Bytes(1)
	if werr := rl.outputError(); werr != nil {
		res.OutputError = werr.Error()
	}

	st := tree.Status()
	if st.Signal != 0 {
		res.Signal = st.Signal
	} else {
		res.ExitCode = st.Code
	}
	limitHit := false
	select {
	case <-rl.limitHit:
		limitHit = true
	default:
	}
	switch {
	case stopped != "":
		res.Outcome = stopped
	case limitHit:
		res.Outcome = OutcomeOutputLimit
	case killedByOOM(res):
		res.Outcome = OutcomeOOM
	case res.Outcome == OutcomeStdioHeld:
	case st.Signal != 0:
		res.Outcome = OutcomeSignaled
	default:
		res.Outcome = OutcomeExited
	}
	t.res, t.err = Finish(res, cause, lifecycle...)
}

// Run starts the command, waits until its whole tree is gone (or released
// under KeepDetached) and returns the result: Start, then Wait. The result
// is never nil. The error is nil only if the root exited 0 and no
// lifecycle failure occurred; otherwise it is a *RunError.
//
// Cancelling ctx, or its deadline or Timeout passing, stops the tree: SIGTERM
// to every process, then SIGKILL after Grace. Run returns after the tree is
// gone in every case; each wait inside it is bounded.
func (c *Cmd) Run(ctx context.Context) (*Result, error) {
	t, err := c.Start(ctx)
	if err != nil {
		var re *RunError
		if errors.As(err, &re) {
			return re.Result, err
		}
		return StartFailed(NewResult(Identity{}), err)
	}
	return t.Wait()
}

// identityOf and Identity.contain are the one conversion each way between
// the durable Identity and the containment layer's.
func identityOf(ci contain.Identity) Identity {
	return Identity{
		Isolation: Isolation(ci.Isolation),
		Pid:       ci.Pid, Pgid: ci.Pgid, Cgroup: ci.Cgroup, Job: ci.Job,
		StartTime: ci.StartTime, BootID: ci.BootID, Marker: ci.Marker,
	}
}

func (id Identity) contain() contain.Identity {
	return contain.Identity{
		Isolation: contain.Isolation(id.Isolation),
		Pid:       id.Pid, Pgid: id.Pgid, Cgroup: id.Cgroup, Job: id.Job,
		StartTime: id.StartTime, BootID: id.BootID, Marker: id.Marker,
	}
}

// Orphan is what is left of a recorded tree whose owner is gone, its root
// running or not: the handle a reaper kills it through. Like Adopt, it
// signals nothing that the identity does not prove to be part of the tree
// (its cgroup; or its group, marker and the start times of its processes
// under the same boot).
type Orphan struct {
	o  contain.Orphan
	id Identity
}

// FindOrphan re-finds the tree named by id. reparented are processes its
// owner recorded as the tree's while it ran (from Reparented): each counts
// as the tree's while its pid still names the process that started at the
// recorded time, and so do its descendants. It returns an error wrapping
// ErrGone when nothing of it can be alive (recorded under another boot,
// its cgroup gone), ErrNotOurs when its recorded root runs but is not
// proved a tree corral started (as for Adopt), and ErrUnsupported where
// trees cannot be found again.
func FindOrphan(id Identity, reparented ...Proc) (*Orphan, error) {
	var o contain.Orphan
	var err error
	if len(reparented) == 0 {
		o, err = contain.Adopt(id.contain())
	} else {
		procs := make([]contain.Proc, len(reparented))
		for i, p := range reparented {
			procs[i] = contain.Proc(p)
		}
		o, err = contain.AdoptWith(id.contain(), procs)
	}
	if err != nil {
		return nil, err
	}
	return &Orphan{o: o, id: id}, nil
}

// Proc names one process for as long as the boot lasts: its pid and its
// start time in clock ticks after boot.
type Proc struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// Reparented lists the live processes of the pgroup tree id, owned by this
// process, that are the tree's only because they were reparented to this
// process (a `setsid -f env -i CMD` whose parent exited): they carry no
// marker, are in no group of the tree and have no member as parent. Once
// the owner is gone nothing links them to the tree, so an owner that
// records its trees records them too, for FindOrphan. It is empty where
// the owner cannot tell its tree's orphans from others (it runs several
// trees, or starts children outside corral), for other isolations and on
// systems without a child subreaper.
func Reparented(id Identity) []Proc {
	procs := contain.Adopted(id.contain())
	out := make([]Proc, len(procs))
	for i, p := range procs {
		out[i] = Proc(p)
	}
	return out
}

// CanAdopt reports whether recorded trees can be found again here (Adopt,
// FindOrphan): Linux only, where /proc gives start times and pidfds pin
// processes.
func CanAdopt() bool { return contain.CanAdopt() }

// Identity is the identity the orphan was found by.
func (o *Orphan) Identity() Identity { return o.id }

// Members lists the tree's live processes.
func (o *Orphan) Members() ([]int, error) { return o.o.Members() }

// Kill kills every process of the tree, waits (up to a bound) until none
// is left and removes what is left of the tree (its empty cgroup). An
// error wrapping ErrKillFailed means the tree outlived SIGKILL; calling
// Kill again is harmless.
func (o *Orphan) Kill() error {
	pids, err := o.o.Members()
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		kerr := o.o.Kill()
		if err := o.o.WaitEmpty(killBound); err != nil {
			return fmt.Errorf("%w: %w", ErrKillFailed, errors.Join(kerr, err))
		}
	}
	return o.o.Remove()
}

// dedupEnv keeps the last entry of each name, where it stands, as os/exec
// does: execve passes duplicates through, and getenv returns the first.
// (Windows compares names without case; its backend dedups again so.)
func dedupEnv(env []string) []string {
	last := make(map[string]int, len(env))
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		last[name] = i
	}
	if len(last) == len(env) {
		return env
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if last[name] == i {
			out = append(out, kv)
		}
	}
	return out
}

// SameWriter reports whether a and b are one writer (not nil), without
// comparing values whose type cannot be compared (that would panic). A Cmd
// (or a session command) whose Stdout and Stderr are one writer gets one
// pipe for both, so their order is kept.
func SameWriter(a, b io.Writer) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}
