package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/term"
)

// merged returns stdout for both streams when they are one place: one
// open file (kcmp says so: 2>&1, or a terminal's descriptors dup'ed from
// one open), or one terminal opened twice. The command then writes both to
// one channel, so what it writes comes out in the order it wrote it, as
// under bash -c or timeout; two pipes read apart cannot keep that order.
func merged(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	o, ok1 := stdout.(*os.File)
	e, ok2 := stderr.(*os.File)
	if !ok1 || !ok2 || !oneOpenFile(o, e) {
		return stdout, stderr
	}
	return stdout, stdout
}

// kcmpFile is KCMP_FILE of linux/kcmp.h (x/sys/unix has no name for it).
const kcmpFile = 0

func oneOpenFile(a, b *os.File) bool {
	if a == b {
		return true
	}
	pid := os.Getpid()
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(pid), uintptr(pid), kcmpFile, a.Fd(), b.Fd(), 0)
	if errno == 0 && r == 0 {
		return true
	}
	// Not one open file (or no kcmp here): one terminal all the same.
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Mode&unix.S_IFMT == unix.S_IFCHR && sb.Mode&unix.S_IFMT == unix.S_IFCHR &&
		sa.Rdev == sb.Rdev && term.IsTerminal(a)
}
