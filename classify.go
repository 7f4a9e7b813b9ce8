package corral

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

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

// OutcomeOf is the outcome of a run that corral stopped because ctx ended:
// timeout if its deadline passed, cancelled otherwise (ctx.Err() must be
// non-nil).
func OutcomeOf(ctx context.Context) Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return OutcomeTimeout
	}
	return OutcomeCancelled
}

// StartFailed makes res the result of a command that did not start
// because of err: outcome start_failed, Error set. err is classified by
// wrapping the sentinel that says why (ErrNotFound, ErrNotExec, ErrHook,
// ErrIsolation) where it can tell; the returned error is a
// *RunError with res and that error. Fields of res already set (the
// identity of a long-lived tree the command was to run in) are kept.
func StartFailed(res *Result, err error) (*Result, error) {
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
		lerr = cause
	}
	return res, &RunError{Result: res, Err: lerr}
}
