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
const MarkerEnv = contain.MarkerName

// killBound bounds the wait for a killed tree to be gone. SIGKILL cannot be
// ignored; what takes longer is a process stuck in the kernel (D state) or
// one that moved itself out of our reach.
const killBound = contain.KillBound

// settleDescendants handles what is left of the tree after its root exited
// by itself, by policy. It fills DescendantsKilled, Detached, StdioHeldBy and
// the stdio_held outcome.
func (t *Tree) settleDescendants() error {
	c, ctx, tree, rl, res := t.c, t.ctx, t.tree, t.rl, t.res
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
		esc, stop := escalation(ctx.Done(), rl.limitHit, c.Escalate, t.kill)
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
		case <-t.stopReq:
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
			if ctx.Err() == nil && !isClosed(t.stopReq) {
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

// escalation returns a channel closed when any of the given channels is
// closed (the caller's context ending, the output limit, the caller's
// Escalate, a Stop's grace running out): any of them ends a grace period.
// A nil channel never fires. The caller calls stop once it no longer needs
// to know (none may ever fire): stop ends the goroutine that watches them
// and waits for it.
func escalation(a, b, c, d <-chan struct{}) (_ <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-a:
		case <-b:
		case <-c:
		case <-d:
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
	sig := c.StopSignal
	if why == OutcomeCancelled {
		sig = StopSignalFor(ctx, sig)
	}
	if s, ok := sig.(syscall.Signal); ok {
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

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// closeAll closes each file that is not nil.
func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// or is f if it is set, else g.
func or(f, g *os.File) *os.File {
	if f != nil {
		return f
	}
	return g
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

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
