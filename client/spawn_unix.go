//go:build unix

package client

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// lockSpawn takes the state directory's spawn lock, so that of many clients
// finding no daemon at once only one starts it and the rest wait for it. The
// lock is a flock: it goes with its holder, even one killed mid-start.
func lockSpawn(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "daemon.spawn.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(spawnWait); ; time.Sleep(10 * time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) || time.Now().After(deadline) {
			f.Close()
			return nil, err
		}
	}
}
