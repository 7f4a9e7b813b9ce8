package daemon

import (
	"runtime"
	"sync"
)

// Threads the daemon keeps ready. The Go runtime cannot survive failing to
// create an OS thread (pthread_create failing is fatal), and a session can
// use up a limit the daemon shares with it (RLIMIT_NPROC, counted per user;
// a pids limit where the sessions' cgroup has none of its own). The
// runtime never ends an idle thread, so threads made at start stay for
// later: with few processors (maxProcs) and threadReserve threads ready,
// the daemon creates no thread of its own while fewer than about
// threadReserve-maxProcs of its goroutines are blocked in system calls at
// once (each call of the API blocks in at most one, briefly).
const (
	threadReserve = 64
	maxProcs      = 4
)

// ReserveThreads caps GOMAXPROCS at maxProcs and makes the runtime start
// threadReserve threads now, which it then keeps idle until needed. It is
// for the daemon's process (cmd/corral), before it serves.
func ReserveThreads() {
	if runtime.GOMAXPROCS(0) > maxProcs {
		runtime.GOMAXPROCS(maxProcs)
	}
	var ready, release sync.WaitGroup
	release.Add(1)
	for i := 0; i < threadReserve; i++ {
		ready.Add(1)
		go func() {
			// A locked goroutine keeps its thread while it waits, so the
			// next one needs another; unlocked, the thread goes idle.
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}
