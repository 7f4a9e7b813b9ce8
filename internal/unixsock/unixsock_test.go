//go:build unix

package unixsock

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestListenRefusesALiveSocketAndReplacesAStaleOne: a socket something
// answers on is never taken over; a file nothing answers on is replaced,
// and the new socket is 0600.
func TestListenRefusesALiveSocketAndReplacesAStaleOne(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	live := filepath.Join(dir, "live.sock")
	lis, err := Listen(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := Listen(live); !errors.Is(err, ErrInUse) {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l2, err := Listen(stale)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	defer l2.Close()
	if fi, err := os.Stat(stale); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("new socket: %v %v", fi.Mode(), err)
	}
	c, err := net.Dial("unix", stale)
	if err != nil {
		t.Fatalf("dial the replaced socket: %v", err)
	}
	c.Close()
}
