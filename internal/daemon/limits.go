package daemon

import "runtime/debug"

// softMemory is the daemon's soft memory limit: past it the Go runtime
// collects harder and returns freed memory to the system, so that a burst
// does not leave the daemon large for good. (The bounds on what clients
// can make it hold are the server's: internal/daemon/server.)
const softMemory = 256 << 20

// boundMemory sets the soft memory limit unless one was given
// ($GOMEMLIMIT).
func boundMemory() {
	if debug.SetMemoryLimit(-1) == 1<<63-1 { // none set
		debug.SetMemoryLimit(softMemory)
	}
}
