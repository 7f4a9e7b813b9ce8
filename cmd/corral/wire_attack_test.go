//go:build linux

package main

import (
	"crypto/rand"
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/wire"
)

// rssOf is the resident set of process pid, in KiB.
func rssOf(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// TestWireAttackRealDaemon: the corral daemon, as the CLI starts it, under
// hostile clients of its own uid: 64 connections idle after their
// handshake, 64 holding a call of 4 MiB less a byte, and a stream of
// connections sending random bytes. After each, corral exec still runs a
// command in time, the daemon is the same process (it did not die and
// get restarted by the CLI), and its memory comes back down.
func TestWireAttackRealDaemon(t *testing.T) {
	e := newDaemonEnv(t)
	if out, rc := e.exec("s", "echo up"); rc != 0 || out != "up\n" {
		t.Fatalf("first exec: %q %d", out, rc)
	}
	pid := e.daemonPid()
	sock := wire.SocketPath(e.state)
	served := func(what string) {
		t.Helper()
		began := time.Now()
		out, rc := e.exec("s", "echo ok")
		took := time.Since(began)
		t.Logf("%s: corral exec after %v, daemon RSS %d KiB", what, took.Round(time.Millisecond), rssOf(t, pid))
		if rc != 0 || out != "ok\n" {
			t.Fatalf("%s: corral exec: %q exit %d", what, out, rc)
		}
		if took > 10*time.Second {
			t.Errorf("%s: corral exec took %v", what, took)
		}
		if now := e.daemonPid(); now != pid {
			t.Fatalf("%s: the daemon is now pid %d, was %d", what, now, pid)
		}
	}
	hello := func(nc net.Conn) {
		wc := wire.NewConn(nc)
		wc.WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{1}})
	}
	var conns []net.Conn
	dial := func() net.Conn {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		return nc
	}
	closeAll := func() {
		for _, nc := range conns {
			nc.Close()
		}
		conns = nil
	}
	defer closeAll()
	t.Logf("daemon pid %d, RSS %d KiB at rest", pid, rssOf(t, pid))

	for i := 0; i < 64; i++ {
		hello(dial())
	}
	time.Sleep(200 * time.Millisecond)
	served("64 idle connections")
	closeAll()

	big := make([]byte, 5+wire.MaxControl-1)
	big[0] = wire.FrameCall
	binary.BigEndian.PutUint32(big[1:5], wire.MaxControl)
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		nc := dial()
		hello(nc)
		wg.Add(1)
		go func() { defer wg.Done(); nc.Write(big) }()
	}
	wg.Wait()
	t.Logf("64 calls of 4 MiB less a byte held: daemon RSS %d KiB", rssOf(t, pid))
	served("64 connections holding 4 MiB each (after the handshake bound closed them)")
	closeAll()

	junk := make([]byte, 64<<10)
	for i := 0; i < 200; i++ {
		rand.Read(junk)
		nc := dial()
		if i%2 == 0 {
			hello(nc)
		}
		nc.Write(junk[:1+i*300])
		nc.Close()
	}
	conns = nil
	served("200 connections of random bytes")
}
