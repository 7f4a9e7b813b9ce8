package daemon

import "golang.org/x/sys/unix"

// execLimits returns what execve accepts, as Linux computes it (fs/exec.c):
// argv and environment strings with their pointers within a quarter of the
// stack limit, at most 6 MiB and at least 128 KiB; each string within
// MAX_ARG_STRLEN (32 pages) including its NUL. The shells inherit the
// daemon's stack limit.
func execLimits() (total, perString int) {
	const maxArgStrlen = 32 * 4096
	total = 6 << 20 // _STK_LIM / 4 * 3
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_STACK, &rl) == nil && rl.Cur != unix.RLIM_INFINITY && rl.Cur/4 < uint64(total) {
		total = int(rl.Cur / 4)
	}
	if total < maxArgStrlen {
		total = maxArgStrlen
	}
	return total, maxArgStrlen
}
