//go:build unix

package client

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// umaskMu keeps two callers of processUmask from racing each other where
// the umask can only be read by setting it.
var umaskMu sync.Mutex

// processUmask is this process's umask, which a session it creates starts
// with, as with its working directory and environment. Linux tells it in
// /proc/self/status (since 4.7) without touching it; elsewhere it is read
// by setting it and putting it back at once, which a file created by
// another thread in between would see.
func processUmask() *uint32 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					m := uint32(n)
					return &m
				}
			}
		}
	}
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o077)
	syscall.Umask(old)
	m := uint32(old)
	return &m
}
