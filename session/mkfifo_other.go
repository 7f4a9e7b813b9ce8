//go:build unix && !linux

package session

import (
	"path/filepath"
	"syscall"
)

// mkfifoIn makes the FIFO name in the directory dir, open as dfd. Without
// mkfifoat it goes by path; the FIFO is then opened and checked through
// dfd (openFifo), so one made elsewhere by a swapped path is never used.
func mkfifoIn(dfd int, dir, name string, mode uint32) error {
	return syscall.Mkfifo(filepath.Join(dir, name), mode)
}
