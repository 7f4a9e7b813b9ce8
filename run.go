package corral

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/corral-dev/corral/internal/contain"
)

// MarkerEnv is the name of the environment variable that marks every
// process of a tree: MarkerEnv=<tree id>.
const MarkerEnv = "CORRAL_TREE"

// killBound bounds the wait for a killed tree to be gone. SIGKILL cannot be
// ignored; what takes longer is a process stuck in the kernel (D state) or
// one that moved itself out of our reach.
const killBound = contain.KillBound

// Run starts the command, waits until its whole tree is gone (or released
// under KeepDetached) and returns the result. The result is never nil.
// The error is nil only if the root exited 0 and no lifecycle failure
// occurred; otherwise it is a *RunError.
//
// Cancelling ctx, or its deadline or Timeout passing, stops the tree: SIGTERM
// to every process, then SIGKILL after Grace. Run returns after the tree is
// gone in every case; each wait inside it is bounded.
func (c *Cmd) Run(ctx context.Context) (*Result, error) {
	res := &Result{ExitCode: -1, FirstOutput: -1}
	if ctx.Err() != nil {
		res.Outcome = outcomeOfCtx(ctx)
		res.Error = "cancelled before start: nothing ran"
		return res, &RunError{Result: res, Err: context.Cause(ctx)}
	}
	path, err := c.lookPath()
	if err != nil {
		return startFailed(res, err)
	}
	iso := contain.Isolation(c.Isolation)
	if iso == contain.Auto || iso == "" {
		iso = contain.Best()
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}

	// Pipes: the child's ends are closed here once it has started.
	outR, outW, err := os.Pipe()
	if err != nil {
		return startFailed(res, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return startFailed(res, err)
	}
	growPipe(outW)
	growPipe(errW)
	stdin, stdinDone, err := c.stdinFile()
	if err != nil {
		closeAll(outR, outW, errR, errW)
		return startFailed(res, err)
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	id := newID()
	spec := &contain.Spec{
		Path:       path,
		Argv:       c.Args,
		Env:        env,
		Dir:        c.Dir,
		Files:      []*os.File{stdin, outW, errW},
		Marker:     MarkerEnv + "=" + id,
		Foreground: c.Foreground,
	}
	if len(spec.Argv) == 0 {
		spec.Argv = []string{c.Path}
	}
	if c.OnStart != nil {
		spec.Hold = func(ci contain.Identity) error { return c.OnStart(publicIdentity(ci)) }
	}
	res.StartedAt = time.Now()
	tree, err := contain.Start(iso, spec)
	if err != nil && isENOEXEC(err) {
		// A file the kernel cannot execute (a script without "#!"): run
		// it with /bin/sh, as POSIX execvp does and as timeout, env and
		// xargs therefore do. Nothing ran, so it is safe to start again.
		spec.Path = "/bin/sh"
		spec.Argv = append([]string{"sh", path}, spec.Argv[1:]...)
		tree, err = contain.Start(iso, spec)
	}
	outW.Close()
	errW.Close()
	stdinDone(tree != nil)
	if err != nil {
		closeAll(outR, errR)
		res.StartedAt = time.Time{}
		return startFailed(res, err)
	}
	ident := tree.Identity()
	res.Isolation = string(ident.Isolation)
	res.Pid, res.Pgid, res.Cgroup = ident.Pid, ident.Pgid, ident.Cgroup

	rl := newRelay(res.StartedAt, c.MaxOutput, outR, errR, c.Stdout, c.Stderr)
	var lifecycle []error
	var stopped Outcome // why corral stopped the tree before its root exited

	select {
	case <-tree.Exited():
	case <-ctx.Done():
		stopped = outcomeOfCtx(ctx)
	case <-rl.limitHit:
		stopped = OutcomeOutputLimit
	}
	if stopped != "" {
		grace := c.grace()
		if stopped == OutcomeOutputLimit {
			grace = -1 // a flood gains nothing from a grace period
		}
		pids, err := stopTreeWith(tree, c.stopSignal(ctx, stopped), grace, c.Escalate)
		if err != nil {
			res.KillFailed = true
			lifecycle = append(lifecycle, err)
		}
		res.ProcessesStopped = len(pids)
		res.DescendantsKilled = len(without(pids, []int{ident.Pid}))
		<-tree.Exited()
	} else if err := c.settleDescendants(ctx, tree, rl, res); err != nil {
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
	if err := tree.Close(); err != nil {
		lifecycle = append(lifecycle, err)
	}
	if c.Foreground {
		if err := contain.ReclaimTerminal(stdin); err != nil {
			lifecycle = append(lifecycle, fmt.Errorf("take back the terminal: %w", err))
		}
	}
	res.EndedAt = time.Now()
	res.Duration = res.EndedAt.Sub(res.StartedAt)
	res.FirstOutput = rl.firstOutput()
	res.StdoutBytes = rl.streams[0].n.Load()
	res.StderrBytes = rl.streams[1].n.Load()
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
	case res.Outcome == OutcomeStdioHeld:
	case st.Signal != 0:
		res.Outcome = OutcomeSignaled
	default:
		res.Outcome = OutcomeExited
	}
	lerr := errors.Join(lifecycle...)
	if lerr != nil {
		res.Error = lerr.Error()
	}
	if res.Outcome == OutcomeExited && res.ExitCode == 0 && lerr == nil {
		return res, nil
	}
	if lerr == nil && stopped != "" {
		lerr = context.Cause(ctx)
		if stopped == OutcomeOutputLimit {
			lerr = nil
		}
	}
	return res, &RunError{Result: res, Err: lerr}
}

// settleDescendants handles what is left of the tree after its root exited
// by itself, by policy. It fills DescendantsKilled, Detached, StdioHeldBy and
// the stdio_held outcome.
func (c *Cmd) settleDescendants(ctx context.Context, tree contain.Tree, rl *relay, res *Result) error {
	members, err := tree.Members()
	if err != nil {
		// We cannot tell who is left: kill whatever is.
		return stopTree(tree, -1, nil)
	}
	if len(members) == 0 {
		return nil
	}
	if c.Descendants == KillDescendants {
		res.DescendantsKilled = len(members)
		res.ProcessesStopped = len(members)
		esc, stop := escalation(ctx, rl, c.Escalate)
		defer stop()
		return stopTree(tree, c.grace(), esc)
	}
	// KeepDetached: give the descendants the drain bound to let go of our
	// pipes; kill those that do not, release the rest.
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-rl.limitHit:
		case <-stop:
			return
		}
		close(stop)
	}()
	eof := rl.eofWithin(c.drain(), stop)
	select {
	case <-stop:
	default:
		close(stop)
	}
	members, err = tree.Members()
	if err != nil {
		return stopTree(tree, -1, nil)
	}
	if !eof && len(members) > 0 {
		holders, err := contain.Holders(members, rl.streams[0].r, rl.streams[1].r)
		if err != nil {
			holders = members // cannot tell: all of them may be holding
		}
		if len(holders) > 0 {
			res.StdioHeldBy = holders
			if ctx.Err() == nil {
				res.Outcome = OutcomeStdioHeld
			}
			if err := tree.KillProcs(holders); err != nil {
				return err
			}
			members = without(members, holders)
		}
	}
	if len(members) > 0 {
		res.Detached = members
		return tree.Release(members)
	}
	return nil
}

// drainOutput waits up to the drain bound for both streams to end. With
// recheck, each 50 ms that they stay held the tree is listed again and what
// is found is killed (counted in DescendantsKilled). It reports whether the
// streams ended; if not, reading is cut off.
func (c *Cmd) drainOutput(tree contain.Tree, rl *relay, res *Result, recheck bool) bool {
	deadline := time.Now().Add(c.drain())
	for {
		left := time.Until(deadline)
		if left <= 0 {
			rl.cut()
			return false
		}
		if rl.eofWithin(min(left, 50*time.Millisecond), nil) {
			return true
		}
		if !recheck {
			continue
		}
		if ms, err := tree.Members(); err == nil && len(ms) > 0 {
			res.DescendantsKilled += len(ms)
			res.ProcessesStopped += len(ms)
			stopTree(tree, -1, nil)
		}
	}
}

// escalation returns a channel closed when the caller's context ends, the
// output limit is hit, or esc is closed: any of them ends a grace period.
// The caller calls stop once it no longer needs to know (the context may
// never end): stop ends the goroutine that watches them and waits for it.
func escalation(ctx context.Context, rl *relay, esc <-chan struct{}) (_ <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-ctx.Done():
		case <-rl.limitHit:
		case <-esc:
		case <-done:
			return
		}
		close(ch)
	}()
	return ch, func() {
		close(done)
		<-exited
	}
}

// stopTree stops the tree (see contain.Stop), wrapping a failure in
// ErrKillFailed.
func stopTree(tree contain.Tree, grace time.Duration, escalate <-chan struct{}) error {
	if err := contain.Stop(tree, grace, killBound, escalate); err != nil {
		return fmt.Errorf("%w: %w", ErrKillFailed, err)
	}
	return nil
}

// stopTreeWith is stopTree with sig as the first signal; it returns the
// processes it stopped.
func stopTreeWith(tree contain.Tree, sig syscall.Signal, grace time.Duration, escalate <-chan struct{}) ([]int, error) {
	pids, err := contain.StopWith(tree, sig, grace, killBound, escalate)
	if err != nil {
		return pids, fmt.Errorf("%w: %w", ErrKillFailed, err)
	}
	return pids, nil
}

// stopSignal is the first signal for a tree stopped for why: the signal
// of a *StopCause the context was cancelled with, else StopSignal, else
// SIGTERM (0).
func (c *Cmd) stopSignal(ctx context.Context, why Outcome) syscall.Signal {
	var sc *StopCause
	if why == OutcomeCancelled && errors.As(context.Cause(ctx), &sc) {
		if s, ok := sc.Signal.(syscall.Signal); ok {
			return s
		}
	}
	if s, ok := c.StopSignal.(syscall.Signal); ok {
		return s
	}
	return 0
}

func (c *Cmd) grace() time.Duration {
	switch {
	case c.Grace == 0:
		return DefaultGrace
	case c.Grace < 0:
		return -1
	}
	return c.Grace
}

func (c *Cmd) drain() time.Duration {
	if c.Drain <= 0 {
		return DefaultDrain
	}
	return c.Drain
}

// lookPath resolves Path as the command would see it: against the PATH of
// Env when Env sets one.
func (c *Cmd) lookPath() (string, error) {
	if c.Path == "" {
		return "", fmt.Errorf("%w: empty path", ErrBadCommand)
	}
	if strings.ContainsRune(c.Path, filepath.Separator) || strings.ContainsRune(c.Path, '/') {
		p := c.Path
		if c.Dir != "" && !filepath.IsAbs(p) {
			p = filepath.Join(c.Dir, p)
		}
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("%s: %w", c.Path, ErrNotFound)
		case err != nil:
			return "", fmt.Errorf("%s: %w: %w", c.Path, ErrNotExec, err)
		case fi.IsDir():
			return "", fmt.Errorf("%s: is a directory: %w", c.Path, ErrNotExec)
		}
		return c.Path, nil
	}
	if c.Env != nil {
		for _, kv := range c.Env {
			if p, ok := strings.CutPrefix(kv, "PATH="); ok {
				return lookIn(c.Path, p)
			}
		}
	}
	p, err := exec.LookPath(c.Path)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("%s: %w", c.Path, ErrNotFound)
		}
		return "", fmt.Errorf("%s: %w: %w", c.Path, ErrNotExec, err)
	}
	return p, nil
}

func lookIn(name, pathList string) (string, error) {
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, ErrNotFound)
}

// stdinFile returns the file to hand the child as descriptor 0, and a
// function to call once the child has started (or failed to).
func (c *Cmd) stdinFile() (*os.File, func(started bool), error) {
	switch in := c.Stdin.(type) {
	case nil:
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, nil, err
		}
		return f, func(bool) { f.Close() }, nil
	case *os.File:
		return in, func(bool) {}, nil
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		return r, func(started bool) {
			r.Close()
			if !started {
				w.Close()
				return
			}
			go func() {
				// EPIPE when the command stops reading is not its failure.
				io.Copy(w, in)
				w.Close()
			}()
		}, nil
	}
}

func startFailed(res *Result, err error) (*Result, error) {
	res.Outcome = OutcomeStartFailed
	switch {
	case errors.Is(err, contain.ErrHold):
		err = fmt.Errorf("%w: %w", ErrHook, err)
	case errors.Is(err, ErrIsolation):
		// Said already, and not the command's failure even if it wraps
		// a permission error.
	case errors.Is(err, contain.ErrUnsupported):
		err = fmt.Errorf("%w: %w", ErrIsolation, err)
	case errors.Is(err, fs.ErrNotExist):
		err = fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, fs.ErrPermission) || isNoExec(err):
		err = fmt.Errorf("%w: %w", ErrNotExec, err)
	}
	res.Error = err.Error()
	return res, &RunError{Result: res, Err: err}
}

func outcomeOfCtx(ctx context.Context) Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return OutcomeTimeout
	}
	return OutcomeCancelled
}

func publicIdentity(ci contain.Identity) Identity {
	return Identity{
		Isolation: Isolation(ci.Isolation),
		Pid:       ci.Pid, Pgid: ci.Pgid, Cgroup: ci.Cgroup, Job: ci.Job,
		StartTime: ci.StartTime, BootID: ci.BootID, Marker: ci.Marker,
	}
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func without(all, drop []int) []int {
	var out []int
	for _, p := range all {
		keep := true
		for _, d := range drop {
			keep = keep && p != d
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}
