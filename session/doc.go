// Package session keeps long-lived shells that run commands one after
// another, so that cd and export persist between commands as they do in a
// terminal, while every command gets its own output, exit status, outcome
// and timings, like corral.Cmd.Run.
//
// A session's shell is a tree of the run layer: started with
// corral.Cmd.Start (cgroup or process group, as with corral.Run), its
// stdout and stderr handed to it as files that the session reads itself,
// stopped through its corral.Tree, and classified with the run layer's
// own functions, so a command's result says what corral.Cmd.Run would.
// The shell reads its commands from a pipe of its own on descriptor 3,
// never from its standard input, so a command that reads stdin gets the
// caller's input or end of file and can neither see nor consume what comes
// next. Completion is detected exactly: each command gets a fresh random
// nonce, and a marker with the nonce on stdout and on stderr tells where
// the command's output ends on each; the one on stdout also carries its
// exit status, the shell's flags and working directory (and, when
// tracked, its exported environment). Output containing anything at all,
// binary output, output without a trailing newline, and no output work the
// same (see the protocol in shell_unix.go).
//
// Each command writes to a stdout and stderr of its own (two FIFOs made
// for it, see cmdpipe_unix.go), so what its background jobs write after
// it has ended is never another command's output: the session keeps it,
// bounded (BackgroundMax), until TakeBackground (State.BackgroundBytes
// says how much there is).
//
// Cancelling a command (its context ends, its timeout passes, its output
// limit is hit) resets the session: the whole session tree is stopped
// (SIGTERM, grace, SIGKILL), the command's result carries the output
// produced before the cut, and the next command starts a fresh shell in the
// session's initial directory and environment: the working directory and
// exported variables set by earlier commands are lost. A command that ends
// the shell (exit, exec, set -e, or a syntax error in a POSIX shell such as
// dash) gets the shell's exit status as its result and also resets the
// session. Callers who cannot afford a reset use RunOnce, which runs one
// command in a fresh contained shell.
//
// A held session (Config.HoldDir) outlives its owner: its command channel
// and output are FIFOs that the shell itself holds open, so no helper
// process is needed and the owner's death costs nothing. An owner that
// stops lets it go with Detach (its Tree is released, not stopped).
// Another process takes the shell over with Attach (corral.Cmd.Adopt),
// after checking the identity recorded through Config.OnStart or
// Config.OnHeld (Linux only; see CanAttach), and
// the FIFOs themselves: HoldDir must be ours alone, and each FIFO is opened
// without following a link and must be ours, private and the one recorded
// (OnHeld's Fifos); otherwise Attach sends nothing and fails with
// ErrNotOurs.
//
// No shell starts with BASH_ENV, ENV, SHELLOPTS, BASHOPTS or exported bash
// functions in its environment, whatever Config.Env or a restored state
// holds: they would make the shell run code before, or instead of, its
// commands (see isStartupHook).
//
// Sessions need a POSIX shell; on Windows, New returns ErrUnsupported.
package session
