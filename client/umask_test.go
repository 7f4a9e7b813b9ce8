//go:build unix

package client

import (
	"syscall"
	"testing"
)

// TestRequestCarriesTheUmask: a local request carries this process's
// umask (a new session's), a remote one none (the daemon's applies).
func TestRequestCarriesTheUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	e, err := request("s", "true", &ExecOptions{}, false)
	if err != nil || e.Umask == nil || *e.Umask != 0o027 {
		t.Fatalf("local request: %+v %v, want umask 0027", e, err)
	}
	e, err = request("s", "true", &ExecOptions{}, true)
	if err != nil || e.Umask != nil {
		t.Fatalf("remote request: umask %v %v, want none", e.Umask, err)
	}
}
