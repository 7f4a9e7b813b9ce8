//go:build !unix

package fds

// CloseOnExecFrom does nothing where no daemon runs: Windows handles are
// inherited only when marked inheritable and listed for the child.
func CloseOnExecFrom(low int) error { return nil }
