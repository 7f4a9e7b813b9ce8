//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/testproc"
)

// openPty opens a new pseudo-terminal pair.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no ptys: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// A command reading the terminal corral was started on gets the input, as
// it would run directly from a shell: it is not stopped for reading from a
// background process group.
func TestRunReadsFromTheTerminal(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	master, slave := openPty(t)
	defer master.Close()
	c := cli(t, mark, state, "run", "--timeout", "5s", "--", "sh", "-c", `printf 'name? '; read x; echo "got $x"`)
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	// corral leads a session whose controlling terminal is the pty, as a
	// shell's foreground job would.
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out bytes.Buffer
	buf := make([]byte, 256)
	for !strings.Contains(out.String(), "name? ") {
		n, err := master.Read(buf)
		if err != nil {
			t.Fatalf("read pty: %v (%q)", err, out.String())
		}
		out.Write(buf[:n])
	}
	master.Write([]byte("corral\n"))
	// Read the terminal until its last holder (corral, its tree) closes
	// it, then look at everything it showed.
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				out.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	err := c.Wait()
	<-readDone
	if got := exitCode(err); got != 0 || !strings.Contains(out.String(), "got corral") || strings.Contains(out.String(), "corral:") {
		t.Fatalf("exit %d, terminal shows %q", got, out.String())
	}
}

// TestRunGivesTheCommandATerminal: with corral's stdout a terminal, the
// command's stdout and stderr are a terminal too (isatty, the same size),
// as under timeout, and its lines reach the real terminal with one "\r\n"
// each, not two carriage returns.
func TestRunGivesTheCommandATerminal(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	master, slave := openPty(t)
	defer master.Close()
	ws := &unix.Winsize{Row: 30, Col: 90}
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		t.Fatal(err)
	}
	c := cli(t, mark, state, "run", "--timeout", "5s", "--", "sh", "-c", `[ -t 1 ] && echo out-is-a-tty; [ -t 2 ] && echo err-is-a-tty >&2; stty size <&1`)
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 256)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	err := c.Wait()
	<-readDone
	want := "out-is-a-tty\r\nerr-is-a-tty\r\n30 90\r\n"
	if got := exitCode(err); got != 0 || out.String() != want {
		t.Fatalf("exit %d, terminal shows %q, want %q", got, out.String(), want)
	}
}
