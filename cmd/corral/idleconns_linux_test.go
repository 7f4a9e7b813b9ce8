//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tlsdir"
	"github.com/corral-dev/corral/internal/wire"
)

// rssKiB is the resident memory of process pid (smaps_rollup's Rss).
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Rss:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no Rss in smaps_rollup of %d", pid)
	return 0
}

// idleConns is how many idle connections of each kind the test holds at
// once: the 1000 idle clients, below the daemon's 1024.
const idleConns = 1000

// TestIdleConnectionMemory measures what the daemon holds for each idle
// client connection, past its handshake, waiting for a call: on the unix
// socket and over TLS. The daemon is a process of its own (its RSS is
// read from /proc); each figure is the growth of its RSS over idleConns
// connections, divided by their number, after a first connection of each
// kind warmed the paths up. Every one of them is still served afterwards
// (each makes a status call). Past its 1024, the daemon closes the
// connection idle longest for each new one, so its memory stays bounded.
func TestIdleConnectionMemory(t *testing.T) {
	e := newDaemonEnv(t)
	ca := filepath.Join(t.TempDir(), "ca")
	if err := tlsdir.Init(ca, tlsdir.InitOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := cli(t, e.mark, e.state, "daemon", "--listen", addr, "--tls", ca)
	stderr, _ := d.StderrPipe()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	var logs testproc.Buffer
	served := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			if !once && strings.Contains(sc.Text(), "serving remote clients") {
				once = true
				close(served)
			}
		}
	}()
	t.Cleanup(func() { e.run("daemon", "stop"); d.Wait() }) // before newDaemonEnv's
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon does not serve:\n%s", logs.String())
	}
	conf, err := tlsdir.ClientConfig(ca, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(nc net.Conn) {
		t.Helper()
		wc := wire.NewConn(nc)
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := wc.WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{wire.Version}}); err != nil {
			t.Fatal(err)
		}
		if typ, b, err := wc.ReadFrame(wire.MaxControl); err != nil || typ != wire.FrameWelcome {
			t.Fatalf("handshake: %q %s %v", typ, b, err)
		}
		nc.SetDeadline(time.Time{})
	}
	kinds := []struct {
		name string
		dial func() net.Conn
	}{
		{"unix", func() net.Conn {
			nc, err := net.Dial("unix", wire.SocketPath(e.state))
			if err != nil {
				t.Fatal(err)
			}
			return nc
		}},
		{"tls", func() net.Conn {
			nc, err := tls.Dial("tcp", addr, conf)
			if err != nil {
				t.Fatal(err)
			}
			return nc
		}},
	}
	pid := d.Process.Pid
	for _, k := range kinds {
		warm := k.dial()
		handshake(warm)
		time.Sleep(200 * time.Millisecond)
		before := rssKiB(t, pid)
		var held []net.Conn
		for range idleConns {
			nc := k.dial()
			handshake(nc)
			held = append(held, nc)
		}
		time.Sleep(500 * time.Millisecond) // every connection's goroutine parked in its read
		after := rssKiB(t, pid)
		per := float64(after-before) / idleConns
		t.Logf("%s: %d idle connections: daemon RSS %d -> %d KiB, %.1f KiB per connection (1000 would be %.0f MiB)",
			k.name, idleConns, before, after, per, per*1000/1024)
		if per > 256 {
			t.Errorf("%s: %.0f KiB per idle connection", k.name, per)
		}
		// Each one held is served: a status call on every connection.
		for i, nc := range held {
			wc := wire.NewConn(nc)
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			if err := wc.WriteJSON(wire.FrameCall, wire.Call{Call: wire.CallStatus}); err != nil {
				t.Fatalf("%s: connection %d of %d: %v", k.name, i, idleConns, err)
			}
			if typ, b, err := wc.ReadFrame(wire.MaxControl); err != nil || typ != wire.FrameReply {
				t.Fatalf("%s: connection %d of %d held idle, then its status call: %q %s %v", k.name, i, idleConns, typ, b, err)
			}
		}
		for _, nc := range append(held, warm) {
			nc.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}

	// 1100 idle clients of the unix socket, one after the other: the
	// daemon holds at most 1024 connections, closing the one idle longest
	// for each new one.
	before := rssKiB(t, pid)
	var all []net.Conn
	for range 1100 {
		nc := kinds[0].dial()
		handshake(nc)
		all = append(all, nc)
	}
	time.Sleep(500 * time.Millisecond)
	after := rssKiB(t, pid)
	open := 0
	for _, nc := range all {
		nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := nc.Read(make([]byte, 1)); err != nil && isTimeout(err) {
			open++ // still held by the daemon: the read waits
		}
		nc.Close()
	}
	t.Logf("1100 idle unix clients: the daemon holds %d, RSS %d -> %d KiB", open, before, after)
	// (One more may be counted open: the last one closed to make room,
	// whose end the daemon is still on its way to, seen so in a slow VM.)
	if open > 1025 || open < 1000 || after-before > 1024*64 {
		t.Errorf("1100 idle clients: %d held (want 1000-1025), RSS grew %d KiB", open, after-before)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
