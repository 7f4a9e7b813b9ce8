// Package corral runs a command as a contained process tree and returns a
// classified result only when the whole tree is gone.
//
// It is shaped like os/exec: build a command with Command, set its fields,
// call Run with a context. Unlike os/exec, the command is contained from
// birth (a cgroup v2, a process group with a child subreaper, or a Windows
// job object), cancellation stops every process of the tree (SIGTERM, a
// grace period, then SIGKILL), a descendant that holds stdout open cannot
// hang the caller (the drain after the root exits is bounded), and no signal
// is ever sent to a process that cannot be proven to be part of the tree.
//
// Every Run returns a *Result. The error is nil only when the command exited
// 0 and nothing went wrong in its lifecycle; otherwise it is a *RunError,
// which errors.Is matches against the outcome's sentinel (ErrTimeout,
// ErrExitStatus, ...) and against each lifecycle failure (ErrDrainCutOff,
// ErrKillFailed), so a failure of corral's own is never hidden behind the
// command's exit code.
package corral
