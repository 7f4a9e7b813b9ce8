package daemon

import "github.com/corral-dev/corral/internal/contain"

// pidsReserve is how many of a pids limit the daemon shares with its
// sessions it keeps for itself: its threads (threadReserve, made at start)
// with room to spare. Session shells are started straight into their own
// cgroups, so the daemon's own forks do not come out of it.
const pidsReserve = 2 * threadReserve

// limitSessionPids gives the sessions' cgroups (the cgroup under which
// trees are made) a pids limit below the daemon's, where cgroups are used
// and a limit applies, so that sessions that use theirs up cannot take
// the daemon's threads.
func (d *Daemon) limitSessionPids() {
	switch d.cfg.Isolation {
	case "", "auto", "cgroup":
	default:
		return
	}
	if _, err := contain.CgroupBase(); err != nil {
		return // no cgroups: the sessions are not made there
	}
	n, err := contain.LimitTreePids(pidsReserve)
	switch {
	case err != nil:
		d.cfg.Log.Warn("cannot give the sessions a pids limit of their own; they share the daemon's", "err", err)
	case n > 0:
		d.cfg.Log.Info("sessions' pids limit", "pids_max", n)
	}
}
