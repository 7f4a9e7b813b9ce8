package corral

import (
	"syscall"

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
