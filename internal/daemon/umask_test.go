//go:build unix

package daemon_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestCoreSessionTakesTheClientsUmask: a session starts with the umask its
// creating request carries (the client's), not the daemon's, and keeps it
// for the fresh shell after a reset (it is in the session's record); a
// request without one leaves the daemon's.
func TestCoreSessionTakesTheClientsUmask(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	d, me := openCore(t)
	mine := syscall.Umask(0o022)
	syscall.Umask(mine)
	client := uint32(0o077)
	if mine == 0o077 {
		client = 0o027
	}
	want := fmt.Sprintf("%04o\n", client)
	if _, out, err := execIn(t, d, me, daemon.ExecRequest{Session: "u", Command: "umask", Dir: "/", Env: env, Umask: &client}); err != nil || out != want {
		t.Fatalf("a new session's umask: %q %v, want %q (the client's)", out, err, want)
	}
	execIn(t, d, me, daemon.ExecRequest{Session: "u", Command: "exit 3", Dir: "/", Env: env})
	if _, out, err := execIn(t, d, me, daemon.ExecRequest{Session: "u", Command: "umask", Dir: "/", Env: env}); err != nil || out != want {
		t.Fatalf("after a reset: %q %v, want %q", out, err, want)
	}
	if _, out, err := execIn(t, d, me, daemon.ExecRequest{Session: "v", Command: "umask", Dir: "/", Env: env}); err != nil || out != fmt.Sprintf("%04o\n", mine) {
		t.Fatalf("a session created without a umask: %q %v, want the daemon's %04o", out, err, mine)
	}
}
