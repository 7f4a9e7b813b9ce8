package corral

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/corral-dev/corral/internal/contain"
)

// This file is the one place where a run's end is classified: the outcome
// of a context that ended, the result of a start that failed, and the
// error that goes with a finished result. Tree uses it for every run, and
// a front-end that runs commands inside a long-lived tree (a session's
// shell) uses it for each of its commands, so that both say the same
// thing the same way.

// ErrStopped is the cause (RunError.Err) of a run that Tree.Stop stopped
// before its root exited; its outcome is cancelled.
var ErrStopped = errors.New("stopped by its owner")

// ErrGone means a recorded tree has nothing left that could be alive (its
// root is not running, it was recorded under another boot, its cgroup no
// longer exists), or that the identity names a process other than the
// recorded one (a reused pid).
var ErrGone = contain.ErrGone

// ErrNotOurs means a recorded identity names a live process that is not
// proved to be the root of a tree corral started (not in the recorded
// cgroup; without the tree's marker): a forged, swapped or corrupted
// record. Adopt and FindOrphan refuse it and signal nothing.
var ErrNotOurs = contain.ErrNotOurs

// ErrReleased is the cause (RunError.Err) of the result of a Tree that
// Tree.Release let go on without its owner; its outcome is cancelled.
var ErrReleased = errors.New("released by its owner: the tree goes on")

// OutcomeOf is the outcome of a run that corral stopped because ctx ended:
// timeout if its deadline passed, cancelled otherwise (ctx.Err() must be
// non-nil).
func OutcomeOf(ctx context.Context) Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return OutcomeTimeout
	}
	return OutcomeCancelled
}

// StopSignalFor is the first signal for a run stopped because ctx was
// cancelled: the signal of the *StopCause ctx was cancelled with, if it
// was and the signal is one, else def (nil: SIGTERM).
func StopSignalFor(ctx context.Context, def os.Signal) os.Signal {
	var sc *StopCause
	if errors.As(context.Cause(ctx), &sc) && sc.Signal != nil {
		return sc.Signal
	}
	return def
}

// NotStarted makes res the result of a command that never started because
// ctx ended first (ctx.Err() must be non-nil): outcome cancelled or
// timeout (OutcomeOf), Error why, and a *RunError whose Err is
// context.Cause(ctx).
func NotStarted(ctx context.Context, res *Result, why string) (*Result, error) {
	res.Outcome = OutcomeOf(ctx)
	res.Error = why
	return res, &RunError{Result: res, Err: context.Cause(ctx)}
}

// StartFailed makes res the result of a command that did not start
// because of err: outcome start_failed, Error set, and a *RunError with
// res and err. Fields of res already set (the identity of a long-lived
// tree the command was to run in) are kept. err is taken as it is: Start
// has classified its own failures already (see classifyStart), and a
// front-end's failures before a command starts (a session that is closed,
// a stdin it could not set up) are its own, not the command's.
func StartFailed(res *Result, err error) (*Result, error) {
	res.Outcome = OutcomeStartFailed
	res.Error = err.Error()
	return res, &RunError{Result: res, Err: err}
}

// classifyStart wraps an error from starting a command in the sentinel
// that says why it did not start (ErrNotFound, ErrNotExec, ErrHook,
// ErrIsolation) where it can tell.
func classifyStart(err error) error {
	switch {
	case errors.Is(err, contain.ErrHold):
		return fmt.Errorf("%w: %w", ErrHook, err)
	case errors.Is(err, ErrIsolation):
		// Said already, and not the command's failure even if it wraps
		// a permission error.
	case errors.Is(err, contain.ErrUnsupported):
		return fmt.Errorf("%w: %w", ErrIsolation, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, fs.ErrPermission) || isNoExec(err):
		return fmt.Errorf("%w: %w", ErrNotExec, err)
	}
	return err
}

// Finish completes res, whose Outcome, ExitCode and Signal are set, and
// returns it with its error. lifecycle are the failures of the run's
// lifecycle (a kill that could not be confirmed, a drain cut off):
// KillFailed and DrainCutOff are set from them (errors.Is ErrKillFailed,
// ErrDrainCutOff) and their text is appended to Error. cause is why corral
// stopped the run, if it did (context.Cause of the context that ended,
// ErrStopped); nil otherwise.
//
// The error is nil only for an exited 0 with no lifecycle failure.
// Otherwise it is a *RunError with res, whose Err is the lifecycle failure
// if there was one (it wins: it is what the caller must act on), else the
// cause.
func Finish(res *Result, cause error, lifecycle ...error) (*Result, error) {
	lerr := errors.Join(lifecycle...)
	if lerr != nil {
		if errors.Is(lerr, ErrKillFailed) {
			res.KillFailed = true
		}
		if errors.Is(lerr, ErrDrainCutOff) {
			res.DrainCutOff = true
		}
		if res.Error == "" {
			res.Error = lerr.Error()
		} else {
			res.Error += "; " + lerr.Error()
		}
	}
	if res.Outcome == OutcomeExited && res.ExitCode == 0 && lerr == nil {
		return res, nil
	}
	if lerr == nil {
		return res, &RunError{Result: res, Err: cause}
	}
	return res, &RunError{Result: res, Err: lerr, lifecycle: lerr}
}
