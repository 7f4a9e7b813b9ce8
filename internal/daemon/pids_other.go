//go:build !linux

package daemon

// limitSessionPids: no pids limits here.
func (d *Daemon) limitSessionPids() {}
