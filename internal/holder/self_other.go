//go:build !linux

package holder

// selfStart has no start time to give where there is no /proc: the pid
// alone is recorded.
func selfStart() (uint64, string) { return 0, "" }
