package vt

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time the calling thread has used; a benchmark
// locks itself to its thread and divides by it, so that its figure is per
// core whatever else the machine runs.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
