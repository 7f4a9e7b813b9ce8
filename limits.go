package corral

import (
	"syscall"
	"time"

	"github.com/corral-dev/corral/internal/contain"
)

// limits is the containment layer's form of the Cmd's resource limits.
func (c *Cmd) limits() contain.Limits {
	return contain.Limits{MemoryMax: c.MemoryMax, MemoryHigh: c.MemoryHigh, CPUs: c.CPUs, PidsMax: c.PidsMax}
}

// account fills res's accounting from the tree, which must be empty and
// not yet closed (its cgroup still there to read).
func account(res *Result, tree contain.Tree, iso Isolation) {
	a, ok := tree.(contain.Accounter)
	if !ok {
		res.Accounting = string(iso) + " isolation"
		return
	}
	u := a.Usage()
	res.MemoryPeakBytes = u.MemoryPeak
	res.CPUUserMs = usecToMs(u.CPUUser)
	res.CPUSystemMs = usecToMs(u.CPUSystem)
	res.CPUThrottledMs = usecToMs(u.CPUThrottled)
	res.PidsPeak = u.PidsPeak
	res.OOMKills = u.OOMKills
	res.Accounting = u.Missing
}

func usecToMs(v *int64) *float64 {
	if v == nil {
		return nil
	}
	ms := float64(*v) / 1000
	return &ms
}

// killedByOOM reports whether a root that corral did not stop died of the
// kernel's OOM killer: SIGKILL, and the tree's memory.events counted an
// OOM kill.
func killedByOOM(res *Result) bool {
	return res.Signal == int(syscall.SIGKILL) && res.OOMKills != nil && *res.OOMKills > 0
}

// Limits are a tree's resource limits, as the Cmd's fields of the same
// names (zero: none). For SetLimits on a running tree, zero leaves a limit
// as it is and a negative value removes it.
type Limits struct {
	MemoryMax  int64   `json:"memory_max,omitempty"`
	MemoryHigh int64   `json:"memory_high,omitempty"`
	CPUs       float64 `json:"cpus,omitempty"`
	PidsMax    int     `json:"pids_max,omitempty"`
}

// IsZero reports whether l sets no limit.
func (l Limits) IsZero() bool { return l == Limits{} }

// Apply is l changed as SetLimits(change) changes a tree: each positive
// field of change replaces l's, each negative one clears it.
func (l Limits) Apply(change Limits) Limits {
	pick := func(cur, ch int64) int64 {
		switch {
		case ch > 0:
			return ch
		case ch < 0:
			return 0
		}
		return cur
	}
	l.MemoryMax = pick(l.MemoryMax, change.MemoryMax)
	l.MemoryHigh = pick(l.MemoryHigh, change.MemoryHigh)
	l.PidsMax = int(pick(int64(l.PidsMax), int64(change.PidsMax)))
	switch {
	case change.CPUs > 0:
		l.CPUs = change.CPUs
	case change.CPUs < 0:
		l.CPUs = 0
	}
	return l
}

// Exact is l as a change that makes a tree's limits exactly l: each
// limit l does not set is removed.
func (l Limits) Exact() Limits {
	neg := func(v int64) int64 {
		if v > 0 {
			return v
		}
		return -1
	}
	e := Limits{MemoryMax: neg(l.MemoryMax), MemoryHigh: neg(l.MemoryHigh), PidsMax: int(neg(int64(l.PidsMax))), CPUs: l.CPUs}
	if l.CPUs <= 0 {
		e.CPUs = -1
	}
	return e
}

func (l Limits) contain() contain.Limits {
	return contain.Limits{MemoryMax: l.MemoryMax, MemoryHigh: l.MemoryHigh, CPUs: l.CPUs, PidsMax: l.PidsMax}
}

// CheckLimits reports whether a tree started now under isolation iso
// ("" or auto: the best available) could be given the limits that l sets
// (its positive fields), without starting one: the error (wrapping
// ErrIsolation) is the one Start would fail with, naming the missing
// cgroup v2 controller and how to get it.
func CheckLimits(iso Isolation, l Limits) error {
	if iso == "" {
		iso = IsolationAuto
	}
	return contain.CheckLimits(contain.Isolation(iso), l.contain())
}

// SetLimits changes the running tree's limits in place, in its cgroup:
// each positive field of l replaces the tree's limit, each negative one
// removes it, zero leaves it. A memory.max below what the tree uses makes
// the kernel reclaim, then OOM-kill. It fails (ErrIsolation) where the
// tree's isolation cannot enforce limits or the controller is not
// delegated, and then changes nothing. It may be called from any
// goroutine while the tree runs.
func (t *Tree) SetLimits(l Limits) error {
	return contain.SetLimits(t.ident.contain(), l.contain())
}

// Usage is what a running tree holds now and has used since it started,
// read from its cgroup. A nil field was not measured; Missing says why.
type Usage struct {
	MemoryBytes     *int64 // memory.current
	MemoryPeakBytes *int64 // memory.peak: since the tree started
	Pids            *int64 // pids.current
	PidsPeak        *int64 // pids.peak
	CPUUserMs       *float64
	CPUSystemMs     *float64
	CPUThrottledMs  *float64
	OOMKills        *int64
	Missing         string
}

// Usage reads the tree's usage now. It may be called from any goroutine;
// once the tree has settled (its cgroup removed) every field is nil.
func (t *Tree) Usage() Usage {
	u, _ := contain.LiveUsage(t.ident.contain())
	return Usage{MemoryBytes: u.MemoryCurrent, MemoryPeakBytes: u.MemoryPeak, Pids: u.PidsCurrent, PidsPeak: u.PidsPeak,
		CPUUserMs: usecToMs(u.CPUUser), CPUSystemMs: usecToMs(u.CPUSystem), CPUThrottledMs: usecToMs(u.CPUThrottled),
		OOMKills: u.OOMKills, Missing: u.Missing}
}

// Meter measures what a running tree uses between Measure and Account:
// one command of a long-lived tree (a session's shell).
type Meter struct {
	t      *Tree
	c      *contain.Counter
	before contain.Usage
	err    error // the tree could not be measured at Measure
	peak   *contain.Peak
}

// Measure starts measuring the tree from now on. Account must be called
// once, to read it and release what it holds. The tree keeps its
// accounting files open from the first Measure until it settles, so each
// measure costs reads, not opens.
func (t *Tree) Measure() *Meter {
	m := &Meter{t: t}
	m.c, m.before, m.err = t.counter()
	if m.err == nil {
		m.before, m.err = m.c.Read(false)
	}
	if m.err == nil && m.before.OOMKills != nil { // a memory controller: a peak to reset
		m.peak, _ = contain.ResetPeak(t.ident.contain())
	}
	return m
}

// counter is the tree's open accounting files, opened on first use.
func (t *Tree) counter() (*contain.Counter, contain.Usage, error) {
	t.acctMu.Lock()
	defer t.acctMu.Unlock()
	if t.acctClosed {
		return nil, contain.Usage{Missing: "the tree has settled"}, contain.ErrGone
	}
	if t.acct == nil && t.acctErr == nil {
		var u contain.Usage
		t.acct, u, t.acctErr = contain.OpenCounter(t.ident.contain())
		t.acctMiss = u.Missing
	}
	return t.acct, contain.Usage{Missing: t.acctMiss}, t.acctErr
}

// closeCounter closes the tree's accounting files, once it has settled.
func (t *Tree) closeCounter() {
	t.acctMu.Lock()
	defer t.acctMu.Unlock()
	t.acctClosed = true
	if t.acct != nil {
		t.acct.Close()
	}
}

// PeakSinceMeasure reports whether the meter's memory peak is its own
// (the kernel resets memory.peak per reader: Linux 6.12 and later), not
// the tree's since it started.
func (m *Meter) PeakSinceMeasure() bool { return m.peak != nil }

// meterWait bounds how long Account waits for a tree whose cgroup is gone
// to have its final result.
const meterWait = 5 * time.Second

// Account fills res's accounting with what the tree used since Measure:
// CPUUserMs, CPUSystemMs, CPUThrottledMs and OOMKills as the growth of
// the tree's counters; MemoryPeakBytes as the peak since Measure where
// PeakSinceMeasure, else the tree's peak since it started, as PidsPeak
// always is. A tree that has settled meanwhile is measured by its final
// result. A field that could not be measured is nil, and res.Accounting
// says why. It releases the meter.
func (m *Meter) Account(res *Result) {
	if m.peak != nil {
		defer m.peak.Close()
	}
	if m.err != nil {
		res.Accounting = m.before.Missing
		return
	}
	var after Usage
	select {
	case <-m.t.done:
		after = finalUsage(m.t.res)
	default:
		u, err := m.c.Read(true)
		if err == nil {
			after = Usage{MemoryPeakBytes: u.MemoryPeak, PidsPeak: u.PidsPeak, CPUUserMs: usecToMs(u.CPUUser),
				CPUSystemMs: usecToMs(u.CPUSystem), CPUThrottledMs: usecToMs(u.CPUThrottled), OOMKills: u.OOMKills, Missing: u.Missing}
			if m.peak != nil {
				if p, err := m.peak.Read(); err == nil {
					after.MemoryPeakBytes = &p
				}
			}
			break
		}
		// The cgroup is gone: the tree settled, or is settling.
		select {
		case <-m.t.done:
			after = finalUsage(m.t.res)
		case <-time.After(meterWait):
			res.Accounting = "the tree's cgroup went away before it could be read"
			return
		}
	}
	delta := func(a *float64, b *int64) *float64 {
		if a == nil || b == nil {
			return nil
		}
		d := max(*a-float64(*b)/1000, 0)
		return &d
	}
	res.CPUUserMs = delta(after.CPUUserMs, m.before.CPUUser)
	res.CPUSystemMs = delta(after.CPUSystemMs, m.before.CPUSystem)
	res.CPUThrottledMs = delta(after.CPUThrottledMs, m.before.CPUThrottled)
	if after.OOMKills != nil && m.before.OOMKills != nil {
		n := max(*after.OOMKills-*m.before.OOMKills, 0)
		res.OOMKills = &n
	}
	res.MemoryPeakBytes, res.PidsPeak = after.MemoryPeakBytes, after.PidsPeak
	res.Accounting = after.Missing
}

// finalUsage is a settled tree's accounting as a Usage.
func finalUsage(r *Result) Usage {
	return Usage{MemoryPeakBytes: r.MemoryPeakBytes, PidsPeak: r.PidsPeak, CPUUserMs: r.CPUUserMs, CPUSystemMs: r.CPUSystemMs,
		CPUThrottledMs: r.CPUThrottledMs, OOMKills: r.OOMKills, Missing: r.Accounting}
}
