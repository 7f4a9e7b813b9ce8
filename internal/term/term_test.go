//go:build linux || darwin

package term

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/testproc"
)

func TestOpenPTYSize(t *testing.T) {
	m, s, err := OpenPTY(100, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer s.Close()
	if c, r, err := Size(s); err != nil || c != 100 || r != 30 {
		t.Fatalf("slave size %dx%d, %v; want 100x30", c, r, err)
	}
	if err := SetSize(m, 132, 43); err != nil {
		t.Fatal(err)
	}
	if c, r, err := Size(s); err != nil || c != 132 || r != 43 {
		t.Fatalf("after SetSize: %dx%d, %v", c, r, err)
	}
	if !IsTerminal(s) || !IsTerminal(m) {
		t.Error("a PTY is not a terminal")
	}
	f, _ := os.Open(os.DevNull)
	defer f.Close()
	if IsTerminal(f) {
		t.Error("/dev/null is a terminal")
	}
	for _, bad := range [][2]int{{0, 24}, {80, 0}, {MaxSize + 1, 24}, {-1, -1}} {
		if _, _, err := OpenPTY(bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "between 1 and") {
			t.Errorf("OpenPTY(%d, %d): %v", bad[0], bad[1], err)
		}
	}
}

// The master is on the runtime's poller (Linux): a blocked Read ends when
// the file is closed, as the holder's shutdown relies on.
func TestMasterReadEndsOnClose(t *testing.T) {
	m, s, err := OpenPTY(80, 24)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		_, err := m.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	m.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("read after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Read on the master outlived its Close: the master is not pollable")
	}
}

func TestRawRestore(t *testing.T) {
	m, s, err := OpenPTY(80, 24)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer s.Close()
	get := func() *unix.Termios {
		var tio *unix.Termios
		control(s, func(fd int) (err error) { tio, err = unix.IoctlGetTermios(fd, ioctlGetTermios); return })
		return tio
	}
	before := *get()
	if before.Lflag&unix.ECHO == 0 || before.Lflag&unix.ICANON == 0 {
		t.Fatalf("a fresh PTY is not cooked: lflag %#x", before.Lflag)
	}
	st, err := MakeRaw(s)
	if err != nil {
		t.Fatal(err)
	}
	raw := get()
	if raw.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 || raw.Oflag&unix.OPOST != 0 || raw.Cc[unix.VMIN] != 1 {
		t.Errorf("not raw: lflag %#x oflag %#x vmin %d", raw.Lflag, raw.Oflag, raw.Cc[unix.VMIN])
	}
	if err := Restore(s, st); err != nil {
		t.Fatal(err)
	}
	if after := *get(); after != before {
		t.Errorf("restore left %+v, want %+v", after, before)
	}
	f, _ := os.Open(os.DevNull)
	defer f.Close()
	if _, err := MakeRaw(f); err == nil || !strings.Contains(err.Error(), os.DevNull) {
		t.Errorf("raw mode on /dev/null: %v", err)
	}
}

// A session leader takes the PTY as its controlling terminal and hands
// the foreground to a child's group: the child reads /dev/tty and sees
// itself in the foreground (ps's '+'), the way the holder runs programs.
func TestControllingAndForeground(t *testing.T) {
	if os.Getenv("TERM_TEST_CHILD") == "1" {
		m, s, err := OpenPTY(80, 24)
		if err != nil {
			os.Exit(10)
		}
		if err := SetControlling(s); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(11)
		}
		cmd := exec.Command("/bin/sh", "-c", `ps -o stat= -p $$ > /dev/tty`)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			os.Exit(12)
		}
		if err := SetForeground(s, cmd.Process.Pid); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(13)
		}
		if fg, err := Foreground(s); err != nil || fg != cmd.Process.Pid {
			os.Exit(14)
		}
		cmd.Wait()
		s.Close()
		buf := make([]byte, 64)
		n, _ := m.Read(buf)
		os.Stdout.Write(buf[:n])
		os.Exit(0)
	}
	mark := testproc.Guard(t, time.Minute)
	cmd := exec.Command(os.Args[0], "-test.run=^TestControllingAndForeground$")
	cmd.Env = append(testproc.Env(mark), "TERM_TEST_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	if !strings.Contains(string(out), "+") {
		t.Errorf("the child was not in the terminal's foreground: ps says %q", out)
	}
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in         string
		cols, rows int
		err        string
	}{
		{"120x40", 120, 40, ""},
		{"80X24", 80, 24, ""},
		{"1x1", 1, 1, ""},
		{"4096x4096", 4096, 4096, ""},
		{"80", 0, 0, "want COLSxROWS"},
		{"80by24", 0, 0, "want COLSxROWS"},
		{"x24", 0, 0, "want COLSxROWS"},
		{"", 0, 0, "want COLSxROWS"},
		{"0x24", 0, 0, "between 1 and 4096"},
		{"80x-1", 0, 0, "between 1 and 4096"},
		{"4097x24", 0, 0, "between 1 and 4096"},
	} {
		cols, rows, err := ParseSize(c.in)
		switch {
		case c.err == "" && (err != nil || cols != c.cols || rows != c.rows):
			t.Errorf("ParseSize(%q) = %d, %d, %v; want %d, %d", c.in, cols, rows, err, c.cols, c.rows)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), `"`+c.in+`"`)):
			t.Errorf("ParseSize(%q) = %d, %d, %v; want an error naming it and saying %q", c.in, cols, rows, err, c.err)
		}
	}
}
