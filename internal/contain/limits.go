package contain

import (
	"fmt"
	"runtime"
	"sync"
)

// Limits are the resource limits of a tree, written into its cgroup (or,
// on Windows, its job object) before its root runs. Zero fields mean no
// limit.
type Limits struct {
	// MemoryMax and MemoryHigh are memory.max and memory.high in bytes.
	MemoryMax, MemoryHigh int64
	// CPUs is cpu.max as a number of CPUs (0.5: half of one).
	CPUs float64
	// PidsMax is pids.max.
	PidsMax int
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// controllers lists the cgroup v2 controllers the limits need.
func (l Limits) controllers() []string {
	var cs []string
	if l.MemoryMax > 0 || l.MemoryHigh > 0 {
		cs = append(cs, "memory")
	}
	if l.CPUs > 0 {
		cs = append(cs, "cpu")
	}
	if l.PidsMax > 0 {
		cs = append(cs, "pids")
	}
	return cs
}

// Usage is what a tree used, read from its cgroup before it is removed.
// A nil field was not measured; Missing says why.
type Usage struct {
	MemoryPeak   *int64 // bytes, memory.peak
	CPUUser      *int64 // microseconds, cpu.stat user_usec
	CPUSystem    *int64 // microseconds, cpu.stat system_usec
	CPUThrottled *int64 // microseconds, cpu.stat throttled_usec
	PidsPeak     *int64 // pids.peak
	OOMKills     *int64 // memory.events oom_kill
	// MemoryCurrent and PidsCurrent (memory.current, pids.current) are
	// what a running tree holds now: LiveUsage only.
	MemoryCurrent *int64
	PidsCurrent   *int64
	// Missing says why the nil fields are absent ("" if none is).
	Missing string
}

// Accounter is a Tree that can tell what it used. Call Usage after the
// tree is empty and before Close.
type Accounter interface {
	Usage() Usage
}

// checkLimits refuses limits for a backend that cannot enforce them, and
// returns the isolation to use.
func checkLimits(iso Isolation, spec *Spec) (Isolation, error) {
	if spec.Limits.IsZero() {
		return iso, nil
	}
	if err := validLimits(spec.Limits); err != nil {
		return iso, err
	}
	if iso == Auto {
		iso = best()
		if runtime.GOOS == "linux" {
			// Say why the cgroup cannot be had, rather than that the
			// fallback cannot limit.
			iso = Cgroup
		}
	}
	if iso != Cgroup && iso != Job {
		return iso, fmt.Errorf("%w: resource limits need cgroup v2 isolation (or a job object on Windows); "+
			"%s isolation cannot enforce them (corral does not fake them with per-process rlimits)", ErrIsolation, iso)
	}
	return iso, nil
}

func validLimits(l Limits) error {
	if l.MemoryMax < 0 || l.MemoryHigh < 0 || l.CPUs < 0 || l.PidsMax < 0 {
		return fmt.Errorf("invalid limits %+v: negative", l)
	}
	return nil
}

// Limits of a running tree (SetLimits): a negative field removes that
// limit (the cgroup's "max"), zero leaves it as it is.

// SetLimits changes the limits of the running tree ident in place, in its
// cgroup: each positive field of l replaces the tree's limit, a negative
// one removes it, zero leaves it. A lower memory.max than the tree uses
// makes the kernel reclaim, then OOM-kill, as it would at a start. It
// fails with ErrIsolation where the tree has no cgroup or the controller
// is not delegated (saying how to get it), and changes nothing then.
func SetLimits(ident Identity, l Limits) error {
	if ident.Isolation != Cgroup || ident.Cgroup == "" {
		return fmt.Errorf("%w: resource limits need cgroup v2 isolation; %s isolation cannot enforce them "+
			"(corral does not fake them with per-process rlimits)", ErrIsolation, ident.Isolation)
	}
	return setLimits(ident.Cgroup, l)
}

// CheckLimits reports whether a tree started now with isolation iso could
// be given limits l (with any positive field set), without starting one: the
// error is the one Start would fail with (ErrIsolation, naming the
// controller that is missing and how to get it).
func CheckLimits(iso Isolation, l Limits) error {
	pos := Limits{MemoryMax: max(l.MemoryMax, 0), MemoryHigh: max(l.MemoryHigh, 0), CPUs: max(l.CPUs, 0), PidsMax: max(l.PidsMax, 0)}
	if pos.IsZero() {
		return nil
	}
	iso, err := checkLimits(iso, &Spec{Limits: pos})
	if err != nil {
		return err
	}
	return checkControllers(iso, pos)
}

// LiveUsage reads what the running tree ident uses now (MemoryCurrent,
// PidsCurrent) and has used since it started (the rest of Usage), from its
// cgroup. It returns an error wrapping ErrGone once the cgroup is removed,
// and ErrUnsupported for a tree without one (Missing then says why).
func LiveUsage(ident Identity) (Usage, error) {
	if ident.Isolation != Cgroup || ident.Cgroup == "" {
		return Usage{Missing: string(ident.Isolation) + " isolation"}, ErrUnsupported
	}
	return liveUsage(ident.Cgroup)
}

// Counter reads a running tree's accounting (cpu.stat, memory.events,
// memory.peak, pids.peak) through descriptors it keeps open, so that a
// long-lived tree measured before and after each of many commands (a
// session's shell) pays a read per file, not an open, a read and a close,
// nor the search for why a file is missing. Its methods are safe for
// concurrent use; Close releases it, and Read then fails with ErrGone.
type Counter struct {
	mu      sync.Mutex
	fds     [4]int // cpuStat, memEvents, memPeak, pidsPeak; -1: absent
	missing string // why what is absent is (fixed at open)
	closed  bool
}

// OpenCounter opens the accounting files of the running tree ident. It
// fails with ErrUnsupported for a tree without a cgroup (the Usage's
// Missing says why) and ErrGone once the cgroup is removed.
func OpenCounter(ident Identity) (*Counter, Usage, error) {
	if ident.Isolation != Cgroup || ident.Cgroup == "" {
		return nil, Usage{Missing: string(ident.Isolation) + " isolation"}, ErrUnsupported
	}
	return openCounter(ident.Cgroup)
}

// Peak is a tree's memory.peak as reset at one moment: the kernel (Linux
// 6.12 and later) keeps a peak of its own for each open file description
// of memory.peak that was written to, starting from the usage then.
// The caller closes it.
type Peak struct{ fd int }

// ResetPeak opens the running tree's memory.peak and resets it for the
// returned Peak. It fails (ErrUnsupported) where the kernel keeps only the
// cgroup's peak since its creation (before Linux 6.12), or there is no
// memory controller.
func ResetPeak(ident Identity) (*Peak, error) {
	if ident.Isolation != Cgroup || ident.Cgroup == "" {
		return nil, ErrUnsupported
	}
	return resetPeak(ident.Cgroup)
}
