//go:build linux

package main

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/wire"
)

// rawExec sends one exec call on a hand-made connection to the daemon of
// e and returns its result, or its error frame.
func rawExec(t *testing.T, e *daemonEnv, x *wire.Exec) (*wire.Result, *wire.Error) {
	t.Helper()
	c := e.rawConn()
	defer c.Net().Close()
	c.Net().SetDeadline(time.Now().Add(20 * time.Second))
	b, _ := json.Marshal(wire.Call{Call: wire.CallExec, Exec: x})
	go rawFrame(c, wire.FrameCall, b)
	res, werr, err := callEnd(c)
	if err != nil {
		t.Fatalf("exec call: %v", err)
	}
	return res, werr
}

// TestDaemonRefusesBadCreations: a session whose cwd is missing, a file or
// longer than a path can be, or whose environment execve would refuse, is
// not created: the client gets bad_request saying what is wrong (naming
// the variable), no record is left, and the name works afterwards.
func TestDaemonRefusesBadCreations(t *testing.T) {
	e := newDaemonEnv(t)
	e.exec("live", "true")
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	long := "/" + strings.Repeat("d", 5000)
	// Enough 100 KiB variables to pass a quarter of the stack limit the
	// daemon inherits from this test (ARG_MAX), within a message.
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_STACK, &rl)
	argMax := uint64(6 << 20)
	if rl.Cur != ^uint64(0) && rl.Cur/4 < argMax {
		argMax = rl.Cur / 4
	}
	var many []string
	for i := 0; i < int(argMax/(100<<10))+2; i++ {
		many = append(many, "MANY"+strings.Repeat("x", i%3)+string(rune('A'+i%26))+"="+strings.Repeat("v", 100<<10))
	}
	many = append(many, "HUGEST="+strings.Repeat("w", 120<<10))
	base := os.Environ()
	cases := []struct {
		name string
		cwd  string
		env  []string
		want string
	}{
		{"missing cwd", "/nonexistent/corral-test-dir", base, "/nonexistent/corral-test-dir"},
		{"file as cwd", file, base, "not a directory"},
		{"5000-byte cwd", long, base, "dir of 5001 bytes"},
		{"one string over 128 KiB", "/", append(append([]string(nil), base...), "BIGVAR="+strings.Repeat("x", 200<<10)), "BIGVAR"},
		{"environment over ARG_MAX", "/", append(append([]string(nil), base...), many...), "HUGEST"},
	}
	for _, c := range cases {
		res, werr := rawExec(t, e, &wire.Exec{Session: "bad", Command: "echo ran", Dir: c.cwd, Env: c.env})
		if res != nil || werr == nil || werr.Kind != wire.KindBadRequest || !strings.Contains(werr.Message, c.want) {
			t.Errorf("%s: result %+v, error %+v; want bad_request naming %q", c.name, res, werr, c.want)
		}
		if s, ok := e.ls()["bad"]; ok {
			t.Fatalf("%s: a refused creation left a record: %+v", c.name, s)
		}
	}
	if _, err := os.Stat(filepath.Join(e.state, "sessions", "bad")); err == nil {
		t.Error("a refused creation left its directory")
	}
	if out, rc := e.exec("bad", "echo fine; pwd"); rc != 0 || !strings.HasPrefix(out, "fine\n") {
		t.Fatalf("the name after the refusals: %q %d", out, rc)
	}
	if s := e.ls()["live"]; s.State != "up" {
		t.Fatalf("a healthy session beside them: %+v", s)
	}
}

// vmKB returns a field of /proc/PID/status in KiB (VmRSS, VmHWM).
func vmKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("daemon %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// hello opens a connection to the daemon's socket and sends a Hello, as a
// client that ignores what the server answers can.
func hello(sock string) (net.Conn, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := wire.NewConn(c).WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{wire.Version}}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// header is a frame header announcing n bytes.
func header(typ byte, n int) []byte {
	h := make([]byte, 5)
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(n))
	return h
}

// drain reads what the server sends until it closes the connection or
// the deadline passes.
func drain(c net.Conn) { io.Copy(io.Discard, c) }

// TestDaemonMemoryBoundedUnderHostileClients: clients of the daemon's own
// uid that announce frames far over their bounds (40 at once), start
// maximal calls and stall in the middle (hundreds of connections), or open
// hundreds of idle connections, leave the daemon's peak RSS under
// rssBound, and it goes on serving a normal client.
//
// rssBound: the daemon's own baseline (a Go program with its store
// mapped, tens of MiB) plus what the limits in
// internal/daemon/server/limits.go let these clients make it hold: at most
// 64 connections served, each with a 64 KiB read buffer and at most what
// it sent of one control frame (a frame is read as it arrives, never
// allocated whole from its header). Before gRPC's limits were set, the
// first attack alone took the daemon past 1 GiB.
func TestDaemonMemoryBoundedUnderHostileClients(t *testing.T) {
	const rssBound = 128 << 10 // KiB
	e := newDaemonEnv(t)
	if out, rc := e.exec("live", "echo up"); rc != 0 || out != "up\n" {
		t.Fatalf("live: %q %d", out, rc)
	}
	pid := e.daemonPid()
	sock := filepath.Join(e.state, "corral.sock")
	t.Logf("daemon RSS at start: %d KiB (peak %d KiB)", vmKB(t, pid, "VmRSS"), vmKB(t, pid, "VmHWM"))
	serves := func(what string) {
		t.Helper()
		began := time.Now()
		if out, rc := e.exec("live", "echo still"); rc != 0 || out != "still\n" {
			t.Fatalf("after %s: the daemon does not serve a normal client: %q %d", what, out, rc)
		}
		t.Logf("after %s: a normal call took %v; RSS %d KiB, peak %d KiB", what, time.Since(began).Round(time.Millisecond),
			vmKB(t, pid, "VmRSS"), vmKB(t, pid, "VmHWM"))
	}
	attack := func(n int, one func(i int)) {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) { defer wg.Done(); one(i) }(i)
		}
		wg.Wait()
	}

	// 40 connections at once, each announcing a 1 GiB Hello, then a
	// 1 GiB call, and sending 15 MB of it.
	junk := make([]byte, 15<<20)
	attack(40, func(i int) {
		c, err := net.DialTimeout("unix", sock, 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		go drain(c)
		if i%2 == 0 {
			c.Write(header(wire.FrameHello, 1<<30))
		} else if hc, err := hello(sock); err == nil {
			defer hc.Close()
			go drain(hc)
			c = hc
			c.Write(header(wire.FrameCall, 1<<30))
		}
		c.Write(junk)
		time.Sleep(time.Second)
	})
	serves("40 frames of 1 GiB announced")

	// 200 connections (64 served at once), each the start of a maximal
	// call that then stalls.
	part := make([]byte, 60<<10)
	attack(200, func(int) {
		c, err := hello(sock)
		if err != nil {
			return
		}
		defer c.Close()
		go drain(c)
		c.Write(header(wire.FrameCall, wire.MaxControl))
		c.Write(part)
		time.Sleep(2 * time.Second)
	})
	serves("200 stalled calls")

	// 300 connections that never make a call.
	var idle []net.Conn
	for i := 0; i < 300; i++ {
		if c, err := hello(sock); err == nil {
			idle = append(idle, c)
		}
	}
	time.Sleep(2 * time.Second)
	peak := vmKB(t, pid, "VmHWM")
	for _, c := range idle {
		c.Close()
	}
	serves("300 idle connections")
	if peak > rssBound {
		t.Errorf("the daemon's peak RSS was %d KiB, over the bound of %d KiB", peak, rssBound)
	}
}
