// Package contain starts one process as the root of a contained tree and
// gives its owner the means to signal, kill, release and wait for every
// process of that tree, whatever the descendants do to escape.
//
// Backends, strongest first:
//
//   - cgroup (Linux, cgroup v2 writable by us): the root is cloned straight
//     into a fresh cgroup (clone3 CLONE_INTO_CGROUP), so it and everything it
//     forks are inside before their first instruction; setsid and double forks
//     cannot leave. Stop is SIGTERM to the root's process group in one
//     kill (the root is kept an unreaped zombie until Close, so the group
//     id cannot be reused), then to every other member in rounds until no
//     new member appears (freezing the cgroup for a last round if forks
//     keep coming); each process gets one SIGTERM. Kill is cgroup.kill;
//     settled is "populated 0" in cgroup.events, watched with inotify.
//   - pgroup (Linux without a usable cgroup): a new process group, the calling
//     process a child subreaper so orphans come back to it, and descendants
//     found by group, by ancestry and by the tree's environment marker. Every
//     process is signalled through a pidfd after its start time was checked;
//     the group id is signalled only while the root is an unreaped zombie (its
//     group id cannot be reused before it is reaped). A descendant that both
//     leaves the group and clears its environment after its parent died can
//     escape; the cgroup backend has no such gap.
//   - pgroup (macOS and the BSDs): a new process group only. setsid and double
//     forks escape it; only the group is signalled, only while its leader is
//     unreaped.
//   - job (Windows): the root is created suspended, assigned to a job object
//     that allows no breakaway, and only then resumed; kill is
//     TerminateJobObject; closing the job does not kill it.
//
// A Tree has one owner; its methods other than Exited, Identity and Status
// must not be called concurrently. Trees are started, stopped, adopted and
// reaped only by the run layer (package corral, whose Tree is that
// owner): sessions and run records reach the backends through
// corral.Cmd.Start, Tree, Adopt and FindOrphan, and corral.Identity is the
// durable form of Identity. Other packages use only its process facts
// (ProcessAlive, SelfStart) and process-wide set-up.
package contain

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Isolation names a containment backend.
type Isolation string

const (
	Auto   Isolation = "auto"
	Cgroup Isolation = "cgroup"
	Pgroup Isolation = "pgroup"
	Job    Isolation = "job"
)

var (
	// ErrUnsupported means the backend or operation does not exist on this
	// platform or machine.
	ErrUnsupported = errors.New("not supported on this system")
	// ErrHold marks an error returned by the hold hook: the child was
	// killed before it ran its first instruction.
	ErrHold = errors.New("start hook failed")
	// ErrIsolation marks a failure of the isolation itself, not of the
	// command: the backend cannot contain a tree here, for this user (a
	// cgroup not delegated to it, say). Nothing of the command ran.
	ErrIsolation = errors.New("isolation not available")
)

// Identity is what identifies a tree durably, before its root has run.
type Identity struct {
	Isolation Isolation
	Pid       int
	Pgid      int
	// Cgroup is the absolute path of the tree's cgroup directory, if any.
	Cgroup string
	// Job is the name of the tree's job object (Windows).
	Job string
	// StartTime is the root's start time in clock ticks after boot (Linux),
	// zero where unknown.
	StartTime uint64
	BootID    string
	// Marker is the NAME=value entry every process of the tree inherits.
	Marker string
}

// Spec describes the root process.
type Spec struct {
	Path string
	Argv []string
	Env  []string
	Dir  string
	// Files are the child's descriptors 0, 1, 2 (and more). The caller
	// keeps ownership and closes its copies after Start.
	Files []*os.File
	// Marker is appended to Env and used to recognise the tree's processes.
	Marker string
	// Foreground makes the tree's process group the foreground group of
	// the terminal on Files[0] (Unix; ErrUnsupported elsewhere).
	Foreground bool
	// Setsid makes the root the leader of a new session (and of a new
	// process group, whose id is its pid) instead of a new group in our
	// session, so that it can take a terminal of its own as its
	// controlling terminal. Not with Foreground (Unix; ErrUnsupported
	// elsewhere).
	Setsid bool
	// Hold, if set, is called with the identity while the root is held
	// before its first instruction. If it returns an error the root is
	// killed and Start returns an error wrapping ErrHold.
	Hold func(Identity) error
	// Limits are written into the tree's cgroup before the root runs; a
	// backend that cannot enforce them refuses to start (ErrIsolation).
	Limits Limits
}

// Status is how the root exited.
type Status struct {
	Code   int // exit code, -1 if killed by a signal
	Signal int // signal number, 0 if it exited
}

// Tree is a started, contained process tree.
type Tree interface {
	Identity() Identity
	// Exited is closed when the root has exited; Status is valid then.
	Exited() <-chan struct{}
	Status() Status
	// Terminate asks every process of the tree to stop (SIGTERM), or
	// returns ErrUnsupported where there is no graceful stop.
	Terminate() error
	// Kill kills every process of the tree.
	Kill() error
	// Members lists the live processes of the tree, the root included
	// until it has exited.
	Members() ([]int, error)
	// WaitEmpty returns when no process of the tree is alive, or when
	// timeout passes (then with os.ErrDeadlineExceeded).
	WaitEmpty(timeout time.Duration) error
	// KillProcs kills the given members of the tree (pids that are not,
	// or no longer, members are left alone).
	KillProcs(pids []int) error
	// Release lets the given processes go: they are no longer part of the
	// tree, and Close will not wait for them.
	Release(pids []int) error
	// Close releases what the tree holds (root zombie, cgroup, job handle).
	// Call it once, after the tree is empty or released.
	Close() error
}

// Start starts spec's root under iso (Auto picks the strongest available
// backend) and returns its tree.
func Start(iso Isolation, spec *Spec) (Tree, error) {
	if iso == "" {
		iso = Auto
	}
	if spec.Setsid && spec.Foreground {
		return nil, errors.New("a root in a new session (Setsid) cannot be in the foreground of our terminal")
	}
	iso, err := checkLimits(iso, spec)
	if err != nil {
		return nil, err
	}
	return start(iso, spec)
}

// Holders returns those of pids that hold an open descriptor on the same
// pipe as one of files (ErrUnsupported where that cannot be known).
func Holders(pids []int, files ...*os.File) ([]int, error) { return holders(pids, files) }

// ReclaimTerminal makes this process's group the foreground group of the
// terminal f again, after a tree started with Foreground has settled.
func ReclaimTerminal(f *os.File) error { return reclaimTerminal(f) }

// Best returns the isolation Auto would choose here.
func Best() Isolation { return best() }

// ErrGone means a recorded tree has nothing left that could be alive: it
// was recorded under another boot, or its cgroup no longer exists.
var ErrGone = errors.New("tree is gone")

// ErrNotOurs means a recorded identity names a live process that cannot be
// proved to be the root of a tree corral started: under cgroup it is not
// in the recorded cgroup, under pgroup it lacks the tree's marker in its
// environment (or the record's marker is not one corral makes). A record
// that was forged, swapped or corrupted looks so; nothing is signalled.
var ErrNotOurs = errors.New("not a tree corral started")

// MarkerName is the name of the environment entry (MarkerName=<tree id>)
// that every tree corral starts carries, and the only name a recorded
// marker may have: a recorded marker is how an adopted tree's processes
// are recognised, so one naming any other entry (HOME=/root) would make
// strangers members.
const MarkerName = "CORRAL_TREE"

// Orphan is a recorded tree whose owner is gone, re-found through its
// identity: its cgroup, or its root's pid and start time, group and marker
// under the same boot. Nothing is signalled that the identity does not
// prove to be part of the tree.
type Orphan interface {
	// Members lists the tree's live processes.
	Members() ([]int, error)
	// Kill kills every process of the tree, in rounds until none is left.
	Kill() error
	// WaitEmpty waits until no process of the tree is alive.
	WaitEmpty(timeout time.Duration) error
	// Remove removes what is left of the tree (its empty cgroup).
	Remove() error
}

// Adopt re-finds the tree named by ident. It returns ErrGone when nothing
// of it can be alive, and ErrNotOurs when its recorded root runs but is
// not proved a root corral started (see ErrNotOurs).
func Adopt(ident Identity) (Orphan, error) { return adopt(ident) }

// AdoptLive takes over a recorded tree whose root is still running, after
// the tree's owner is gone (a daemon that crashed or was stopped). The
// result is a Tree like one from Start, but every signal goes through the
// identity gate of Adopt, Exited is learnt through a pidfd on the root
// (opened only after its start time matched the record), and Status is
// unknown (Code -1): the root is not our child. It returns ErrGone when the
// recorded root is not running, ErrNotOurs when it runs but is not proved
// a root corral started, ErrUnsupported where trees cannot be found again.
func AdoptLive(ident Identity) (Tree, error) { return adoptLive(ident) }

// CanAdopt reports whether recorded trees can be found again here (Adopt
// and AdoptLive): Linux only, where /proc gives start times and pidfds
// pin processes.
func CanAdopt() bool { return canAdopt }

// ProcessAlive reports whether the process pid that started at start
// (clock ticks after boot) is still running. Where that cannot be known it
// reports true, so nothing is reaped on a guess.
func ProcessAlive(pid int, start uint64) bool { return processAlive(pid, start) }

// SelfStart returns this process's start time in clock ticks after boot
// (0 where unknown).
func SelfStart() uint64 { return selfStart() }

// KillBound is how long Stop waits for a killed tree to be gone. SIGKILL
// cannot be ignored; what takes longer is a process stuck in the kernel (D
// state) or one that moved itself out of reach.
const KillBound = 10 * time.Second

// Stop stops every process of the tree: SIGTERM, up to grace for them to go
// (cut short when escalate is closed; a negative grace skips SIGTERM), then
// SIGKILL. While it waits it calls Terminate again, which signals processes
// that appeared since (a child whose fork was in flight when its parent got
// SIGTERM). It returns when the tree is empty, or with an error once
// killBound has passed after the SIGKILL.
func Stop(tree Tree, grace, killBound time.Duration, escalate <-chan struct{}) error {
	_, err := StopWith(tree, 0, grace, killBound, escalate)
	return err
}

// StopWith is Stop with sig as the first signal in place of SIGTERM (0
// means SIGTERM): a front-end forwards the SIGINT or SIGHUP it received, or
// a timeout sends what the caller chose. A tree that cannot be sent another
// signal (a taken-over tree, a job object) gets what Terminate sends.
// stopped lists the processes found in the tree while stopping it (before
// the first signal and before SIGKILL): those corral stopped.
func StopWith(tree Tree, sig syscall.Signal, grace, killBound time.Duration, escalate <-chan struct{}) (stopped []int, _ error) {
	seen := map[int]bool{}
	note := func() {
		if ms, err := tree.Members(); err == nil {
			for _, p := range ms {
				if !seen[p] {
					seen[p] = true
					stopped = append(stopped, p)
				}
			}
		}
	}
	terminate := tree.Terminate
	if st, ok := tree.(signalTerminator); ok && sig != 0 && sig != syscall.SIGTERM {
		// sig goes to every process (once each) while the root runs.
		// Once the root has exited (it handled the signal: a Python
		// KeyboardInterrupt, a shell's trap), what is left gets SIGTERM,
		// as descendants left after any exit do: background jobs of a
		// non-interactive shell ignore SIGINT and would otherwise live
		// out the grace.
		sent := map[int]bool{}
		terminate = func() error {
			select {
			case <-tree.Exited():
				return tree.Terminate()
			default:
				return st.terminateWith(sig, sent)
			}
		}
	}
	note()
	if grace >= 0 {
		// A failed or unsupported first signal is no reason not to kill.
		if err := terminate(); err == nil && waitTerminated(tree, terminate, grace, escalate) {
			return stopped, nil
		}
		note()
	}
	kerr := tree.Kill()
	if err := tree.WaitEmpty(killBound); err != nil {
		return stopped, fmt.Errorf("tree not gone after SIGKILL: %w", errors.Join(kerr, err))
	}
	return stopped, nil
}

// signalTerminator is a tree that can send its first stop signal as
// another signal than SIGTERM: to every member whose pid is not in sent,
// adding it there. It leaves what Terminate has sent alone, so that a
// later Terminate reaches every process.
type signalTerminator interface {
	terminateWith(sig syscall.Signal, sent map[int]bool) error
}

// waitTerminated waits up to d for the tree to empty, in short slices,
// signalling newcomers (with terminate) between them and noticing an
// escalation promptly.
func waitTerminated(tree Tree, terminate func() error, d time.Duration, escalate <-chan struct{}) bool {
	deadline := time.Now().Add(d)
	slice := 5 * time.Millisecond
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if tree.WaitEmpty(min(slice, left)) == nil {
			return true
		}
		select {
		case <-escalate:
			return false
		default:
		}
		terminate()
		slice = min(2*slice, 50*time.Millisecond)
	}
}

// pollEmpty calls count until it reports no live process, or until timeout
// has passed (then with os.ErrDeadlineExceeded), pausing between calls
// from 200 us up to 10 ms. It serves the backends that cannot be told
// when a tree empties.
func pollEmpty(timeout time.Duration, what string, count func() (int, error)) error {
	deadline := time.Now().Add(timeout)
	pause := 200 * time.Microsecond
	for {
		n, err := count()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes of %s left: %w", n, what, os.ErrDeadlineExceeded)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}
