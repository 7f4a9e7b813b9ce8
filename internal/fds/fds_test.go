//go:build unix

package fds

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCloseOnExecFrom(t *testing.T) {
	// syscall.Pipe gives descriptors without close-on-exec, as a parent
	// that is not Go may hand them down.
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	for _, fd := range p {
		if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC != 0 {
			t.Skipf("descriptor %d is already close-on-exec: nothing to test", fd)
		}
	}
	if err := CloseOnExecFrom(p[1]); err != nil {
		t.Fatal(err)
	}
	if fl, _ := unix.FcntlInt(uintptr(p[1]), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor %d (at the bound) not marked close-on-exec", p[1])
	}
	if p[0] < p[1] {
		if fl, _ := unix.FcntlInt(uintptr(p[0]), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC != 0 {
			t.Errorf("descriptor %d (below the bound) was marked too", p[0])
		}
	}
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETFD, 0); err != nil {
		t.Errorf("descriptor %d was closed: %v", p[1], err)
	}
}
