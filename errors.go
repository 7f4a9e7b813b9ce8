package corral

import (
	"errors"
	"fmt"
	"strings"

	"github.com/corral-dev/corral/internal/contain"
)

// Sentinels for the outcome of a run; a *RunError matches the one of its
// outcome with errors.Is.
var (
	ErrExitStatus  = errors.New("exited with non-zero status")
	ErrSignaled    = errors.New("killed by a signal")
	ErrTimeout     = errors.New("timed out")
	ErrCancelled   = errors.New("cancelled")
	ErrOutputLimit = errors.New("output limit reached")
	ErrStdioHeld   = errors.New("a detached descendant held stdio past the drain bound")
	ErrStart       = errors.New("command did not start")
	// ErrOOM: outcome oom, the root killed by the kernel's OOM killer.
	ErrOOM = errors.New("killed by the OOM killer")
)

// Sentinels for why a command did not start; they come wrapped in a
// *RunError with outcome start_failed.
var (
	ErrNotFound   = errors.New("command not found")
	ErrNotExec    = errors.New("command cannot be executed")
	ErrHook       = errors.New("start hook failed")
	ErrIsolation  = contain.ErrIsolation
	ErrBadCommand = errors.New("invalid command")
)

// Lifecycle failures: each is reported even when the command also failed.
var (
	// ErrDrainCutOff means stdout or stderr was still held open when the
	// drain bound passed; output after that point was not read.
	ErrDrainCutOff = errors.New("output drain cut off")
	// ErrKillFailed means the tree could not be confirmed gone.
	ErrKillFailed = errors.New("tree could not be killed")
)

// ErrUnsupported is returned for what this platform cannot do.
var ErrUnsupported = contain.ErrUnsupported

// RunError is the error of a run that did not exit 0 cleanly. Result is the
// full result; Err, if set, is the underlying cause (why it did not start,
// why the kill failed).
type RunError struct {
	Result *Result
	Err    error

	lifecycle error // set by Finish: the lifecycle failures alone
}

// Lifecycle is the failures of the run's lifecycle (a kill that could not
// be confirmed, a drain cut off, releasing the tree's containment), nil
// if there were none: Err without the cause of a stop.
func (e *RunError) Lifecycle() error { return e.lifecycle }

func (e *RunError) Error() string {
	r := e.Result
	var b strings.Builder
	switch r.Outcome {
	case OutcomeExited:
		fmt.Fprintf(&b, "exit status %d", r.ExitCode)
	case OutcomeSignaled:
		fmt.Fprintf(&b, "killed by signal %d", r.Signal)
	case OutcomeStartFailed:
		b.WriteString("start failed")
	case OutcomeOOM:
		b.WriteString("killed by the OOM killer (memory limit)")
	default:
		b.WriteString(string(r.Outcome))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if r.DrainCutOff && !errors.Is(e.Err, ErrDrainCutOff) {
		b.WriteString("; output drain cut off")
	}
	return b.String()
}

func (e *RunError) Unwrap() error { return e.Err }

// Is matches the sentinel of the outcome and of every lifecycle failure.
func (e *RunError) Is(target error) bool {
	r := e.Result
	switch target {
	case ErrExitStatus:
		return r.Outcome == OutcomeExited && r.ExitCode != 0
	case ErrSignaled:
		return r.Outcome == OutcomeSignaled
	case ErrTimeout:
		return r.Outcome == OutcomeTimeout
	case ErrCancelled:
		return r.Outcome == OutcomeCancelled
	case ErrOutputLimit:
		return r.Outcome == OutcomeOutputLimit
	case ErrStdioHeld:
		return r.Outcome == OutcomeStdioHeld
	case ErrStart:
		return r.Outcome == OutcomeStartFailed
	case ErrOOM:
		return r.Outcome == OutcomeOOM
	case ErrDrainCutOff:
		return r.DrainCutOff
	case ErrKillFailed:
		return r.KillFailed
	}
	return false
}
