//go:build unix

package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// parseSignal reads a signal as GNU timeout's -s does: a number, or a
// name with or without the SIG prefix, in any case (9, KILL, SIGINT, int).
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 || unix.SignalName(syscall.Signal(n)) == "" && (n < 32) {
			return 0, fmt.Errorf("--signal: no signal %d", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("--signal: no signal named %q (want a name like INT, TERM, HUP, or a number)", s)
}
