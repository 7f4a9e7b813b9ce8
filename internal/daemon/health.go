package daemon

import "time"

// What a front-end's health and metrics endpoints read of the core.

// Recovered is closed once start-up recovery has been through every
// recorded session and reaped the orphaned trees (a take-over being
// retried for a local shortage may still go on).
func (d *Daemon) Recovered() <-chan struct{} { return d.recovered }

// Recovering is how many recorded sessions are still being recovered.
func (d *Daemon) Recovering() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.recovering)
}

// OrphansReaped is how many orphaned trees (oneshots of a daemon that
// died, corral runs whose owner was killed) this daemon has killed.
func (d *Daemon) OrphansReaped() int64 { return d.reaped.Load() }

// Started is when the daemon was opened.
func (d *Daemon) Started() time.Time { return d.started }

// Takeovers is how many sessions' shells this daemon took over from an
// earlier one.
func (d *Daemon) Takeovers() int64 { return d.takeovers.Load() }

// Resets is how many times a session's shell was discarded for a fresh
// one (a timeout, a cancel, a command that ended its shell) in a command
// this daemon ran.
func (d *Daemon) Resets() int64 { return d.resets.Load() }
