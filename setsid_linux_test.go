package corral_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestSetsid: a tree started with Setsid leads a session of its own (its
// group id is its pid, as for every tree), is recorded before it runs,
// and is still contained: stopping it ends a descendant that left its
// group; Setsid with Foreground is refused before anything runs.
func TestSetsid(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		pidFile := filepath.Join(testproc.TempDir(t), "pid")
		c := sh(iso, mark, "setsid sleep 600 & echo $! >"+pidFile+"; exec sleep 600")
		c.Setsid = true
		var recorded corral.Identity
		c.OnStart = func(id corral.Identity) error { recorded = id; return nil }
		tree, err := c.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		id := tree.Identity()
		if recorded != id {
			t.Fatalf("recorded %+v, tree %+v", recorded, id)
		}
		if sid, err := unix.Getsid(id.Pid); err != nil || sid != id.Pid || id.Pgid != id.Pid {
			t.Fatalf("the root's session %d (%v), group %d, pid %d", sid, err, id.Pgid, id.Pid)
		}
		if mySid, _ := unix.Getsid(0); mySid == id.Pid {
			t.Fatal("the root is in our session")
		}
		var escaped int
		for deadline := time.Now().Add(10 * time.Second); escaped == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			b, _ := os.ReadFile(pidFile)
			escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if escaped == 0 {
			t.Fatal("no descendant started")
		}
		tree.Stop(time.Second)
		tree.Wait()
		for deadline := time.Now().Add(5 * time.Second); testproc.Alive(escaped); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the descendant %d outlived its tree", escaped)
			}
		}
	})
	c := corral.Command("/bin/true")
	c.Setsid, c.Foreground = true, true
	if _, err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Setsid") {
		t.Errorf("Setsid with Foreground: %v", err)
	}
}
