package corral

import (
	"io"
	"os"
	"time"

	"github.com/corral-dev/corral/internal/contain"
)

// Defaults for the fields of Cmd left zero.
const (
	DefaultGrace = 5 * time.Second
	DefaultDrain = 2 * time.Second
)

// Isolation selects how a tree is contained.
type Isolation string

const (
	// IsolationAuto picks the strongest backend available: cgroup, then
	// pgroup (Linux); pgroup (macOS, BSD); job (Windows).
	IsolationAuto Isolation = "auto"
	// IsolationCgroup requires a writable cgroup v2 (Linux).
	IsolationCgroup Isolation = "cgroup"
	// IsolationPgroup uses a process group (plus a child subreaper and
	// pidfds on Linux).
	IsolationPgroup Isolation = "pgroup"
	// IsolationJob is a Windows job object.
	IsolationJob Isolation = "job"
)

// BestIsolation reports what IsolationAuto picks on this machine.
func BestIsolation() Isolation { return Isolation(contain.Best()) }

// Policy says what happens to descendants still running when the root exits.
type Policy int

const (
	// KillDescendants stops them (SIGTERM, grace, SIGKILL): the tree lives
	// and dies with its root.
	KillDescendants Policy = iota
	// KeepDetached releases descendants that no longer hold the command's
	// stdout or stderr once the drain bound passes; they are listed in
	// Result.Detached. One that still holds them is killed, and the outcome
	// is stdio_held.
	KeepDetached
)

// Identity is what identifies a started tree durably: enough to find and
// kill it after the process that started it is gone, and to prove that a
// pid has not been reused. It is the one durable shape of a tree's
// identity: Result reports it, Cmd.OnStart is given it to record, Adopt
// takes it back, and its JSON form (snake_case, the form run records have
// always had) is what records store.
type Identity struct {
	Isolation Isolation `json:"isolation"`
	// Pid is the root's pid; Pgid its process group (== Pid).
	Pid  int `json:"pid"`
	Pgid int `json:"pgid"`
	// Cgroup is the absolute path of the tree's cgroup, if it has one.
	Cgroup string `json:"cgroup,omitempty"`
	// Job is the name of the tree's job object (Windows).
	Job string `json:"job,omitempty"`
	// StartTime is the root's start time in clock ticks after boot (field
	// 22 of /proc/PID/stat); with BootID it names the root for ever.
	StartTime uint64 `json:"start_time"`
	BootID    string `json:"boot_id"`
	// Marker is the NAME=value environment entry every process of the
	// tree inherits.
	Marker string `json:"marker"`
}

// Cmd is a command to run as a contained tree. Set the fields, then call Run
// once. The zero values give the defaults described on each field.
type Cmd struct {
	// Path is the program to run; if it has no path separator it is looked
	// up in PATH (of Env, if Env sets one).
	Path string
	// Args holds the command line, Args[0] included.
	Args []string
	// Env is the environment; nil means this process's environment.
	Env []string
	// Dir is the working directory; "" means this process's.
	Dir string

	// Stdin is the command's input. nil means the null device; an *os.File
	// is handed to the command directly; any other reader is copied through
	// a pipe (the copying goroutine ends when the reader returns).
	Stdin io.Reader
	// Stdout and Stderr receive the output as it is produced; nil discards
	// it (it is still counted and timed).
	Stdout io.Writer
	Stderr io.Writer
	// StdoutFile and StderrFile, if set, are handed to the root as its
	// stdout and stderr directly, in place of a pipe that the Tree reads:
	// whoever holds the other end reads that stream, as with os/exec and
	// an *os.File. Such a stream is not relayed, counted, timed, limited
	// by MaxOutput or drained (the result counts none of it, and the
	// writer of that stream is not used). A long-lived tree whose owner
	// reads its output itself (a session's shell, which finds where each
	// command's output ends) uses them. The caller keeps the files and
	// may close its copies once Start has returned.
	StdoutFile *os.File
	StderrFile *os.File
	// ExtraFiles are handed to the root as descriptors 3, 4, ... (Unix), as
	// for os/exec: a command channel, say. The caller keeps them and may
	// close its copies once Start has returned.
	ExtraFiles []*os.File

	// Timeout bounds the run; 0 means none (the context may still have a
	// deadline).
	Timeout time.Duration
	// Grace is the time between the first signal (StopSignal) and SIGKILL
	// when the tree is stopped; 0 means DefaultGrace, negative means
	// SIGKILL at once.
	Grace time.Duration
	// StopSignal is the first signal sent to every process of the tree
	// when it is stopped (a timeout, a cancel), as timeout -s chooses it;
	// nil means SIGTERM. A cancel whose cause is a *StopCause sends the
	// cause's signal instead. Unix; elsewhere the tree is terminated as
	// its backend can.
	StopSignal os.Signal
	// Drain bounds how long stdout and stderr are read after the root has
	// exited (and, with the default policy, its descendants have been
	// stopped); 0 means DefaultDrain.
	Drain time.Duration
	// MaxOutput limits stdout+stderr in bytes; 0 means no limit. Output
	// beyond it is not delivered and the tree is killed.
	MaxOutput int64
	// Descendants is the policy for descendants alive when the root exits.
	Descendants Policy
	// Isolation selects the containment backend; "" means IsolationAuto.
	Isolation Isolation

	// Resource limits of the whole tree, in force before the root runs
	// its first instruction (written into its fresh cgroup); zero means
	// none. They need cgroup isolation with the cgroup v2 controller
	// delegated (memory, cpu, pids): where that is missing, and under any
	// other isolation, Start fails with ErrIsolation rather than run the
	// command unlimited. They are never approximated with per-process
	// rlimits.
	//
	// MemoryMax is memory.max in bytes: past it the kernel's OOM killer
	// kills a process of the tree (outcome oom if that was the root).
	// MemoryHigh is memory.high: past it the tree is throttled and
	// reclaimed. CPUs is cpu.max as a number of CPUs (0.5, 2). PidsMax is
	// pids.max: forks past it fail.
	MemoryMax  int64
	MemoryHigh int64
	CPUs       float64
	PidsMax    int

	// OutputTTY, if set to a terminal (the one Stdout writes to), gives the
	// root a new pseudo-terminal of that terminal's size as its stdout (and
	// stderr, when Stdout and Stderr are one writer) instead of a pipe, so
	// that it sees a terminal (colour, progress bars, line buffering), as
	// it would run directly or under timeout; its output is relayed and
	// counted as a pipe's is. Each receive from OutputTTYResize copies the
	// terminal's size again (a caller forwards SIGWINCH). Where a
	// pseudo-terminal cannot be made (not Linux, none left), pipes are used.
	OutputTTY       *os.File
	OutputTTYResize <-chan struct{}

	// OnStart, if set, is called with the tree's identity before the root
	// runs its first instruction (so the caller can record it durably). If
	// it returns an error, the root is killed unrun and the outcome is
	// start_failed, wrapping ErrHook.
	OnStart func(Identity) error
	// Escalate, if set, skips the rest of a grace period when closed: the
	// tree is killed at once (a second Ctrl-C).
	Escalate <-chan struct{}

	// Foreground gives the terminal on Stdin (an *os.File) to the tree's
	// process group while it runs, as a shell does for a foreground job,
	// and takes it back for this process's group once the tree has
	// settled: the command can read the terminal, and the terminal's
	// Ctrl-C goes to it. Unix only (ErrUnsupported elsewhere).
	Foreground bool
	// Setsid starts the root as the leader of a new session (and so of a
	// new process group whose id is its pid, as for every tree) instead
	// of a new group in this process's session: nothing of this session
	// (a hangup, its terminal's signals) reaches it, and it may make a
	// terminal of its own its controlling terminal, as the holder of a
	// terminal session does. The tree is contained and its identity
	// recorded (OnStart) as for any other. Not with Foreground. Unix
	// only (ErrUnsupported elsewhere).
	Setsid bool
}

// Command returns a Cmd that runs name with args, as exec.Command does.
func Command(name string, args ...string) *Cmd {
	return &Cmd{Path: name, Args: append([]string{name}, args...)}
}

// StopCause, given as the cause when cancelling Run's context
// (context.WithCancelCause), names the signal that stops the tree: a
// front-end that received SIGINT cancels with &StopCause{syscall.SIGINT}
// so that the tree gets SIGINT first, as it would from a terminal, then
// Grace, then SIGKILL.
type StopCause struct{ Signal os.Signal }

func (c *StopCause) Error() string { return "received " + c.Signal.String() }
