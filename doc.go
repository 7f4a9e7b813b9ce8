// Package corral runs a command as a contained process tree and returns a
// classified result only when the whole tree is gone.
//
// It is shaped like os/exec: build a command with Command, set its fields,
// then Run it with a context, or Start it and Wait for its Tree. Unlike
// os/exec, the command is contained from birth (a cgroup v2, a process
// group with a child subreaper, or a Windows job object, with any resource
// limits in force before its first instruction), cancellation stops every
// process of the tree (SIGTERM or the chosen signal, a grace period, then
// SIGKILL), a descendant that holds stdout open cannot hang the caller
// (the drain after the root exits is bounded), and no signal is ever sent
// to a process that cannot be proven to be part of the tree.
//
// A Tree is the handle on a running tree: Wait, Stop (or StopWith, with a
// first signal and an escalation), Identity, Exited, and Release, which
// lets a long-lived tree outlive its owner unsignalled. Its Identity is
// durable (pid and start time under a boot id, cgroup, group, marker):
// OnStart gives it to the caller before the root runs, so that it can be
// recorded; Adopt takes a recorded tree over after its owner died, and
// FindOrphan re-finds what is left of one to kill it. Every later signal
// goes through that identity. The session package builds its shells on
// this, and internal/record its run records.
//
// Every run's result is a *Result. The error is nil only when the command
// exited 0 and nothing went wrong in its lifecycle; otherwise it is a
// *RunError, which errors.Is matches against the outcome's sentinel
// (ErrTimeout, ErrExitStatus, ...) and against each lifecycle failure
// (ErrDrainCutOff, ErrKillFailed), so a failure of corral's own is never
// hidden behind the command's exit code. How a run ended is classified in
// one place (OutcomeOf, NotStarted, StartFailed, Finish), which a front-end
// that runs commands inside a long-lived tree uses too, so both say the
// same thing the same way. The output of both is accounted by
// internal/output.
package corral
