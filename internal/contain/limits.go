package contain

import (
	"fmt"
	"runtime"
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
