//go:build !unix

package main

import (
	"fmt"
	"syscall"
)

// parseSignal: only the default stop is known here.
func parseSignal(s string) (syscall.Signal, error) {
	return 0, fmt.Errorf("--signal %s: not supported on this system", s)
}
