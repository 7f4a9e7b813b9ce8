//go:build linux

package server_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/wire"
)

// TestHandshake: the daemon speaks the highest version a client offers
// that it knows, and refuses, saying why, a client with none in common, a
// first frame that is not a Hello, and a Hello over its bound; the
// connection then closes.
func TestHandshake(t *testing.T) {
	testproc.Guard(t, 30*time.Second)
	c := serveDaemon(t, server.Config{Config: daemon.Config{}})
	hello := func(h wire.Hello) []byte { b, _ := json.Marshal(h); return b }
	for _, tc := range []struct {
		name    string
		typ     byte
		payload []byte
		welcome int       // the version agreed, or 0
		kind    wire.Kind // else the error
	}{
		{"this version and a later one", wire.FrameHello, hello(wire.Hello{Protocol: "corral", Versions: []int{7, 1}}), 1, ""},
		{"version 1 and 2", wire.FrameHello, hello(wire.Hello{Protocol: "corral", Versions: []int{1, 2}}), 2, ""},
		{"only a later version", wire.FrameHello, hello(wire.Hello{Protocol: "corral", Versions: []int{3, 7}}), 0, wire.KindVersion},
		{"another protocol", wire.FrameHello, hello(wire.Hello{Protocol: "http", Versions: []int{1}}), 0, wire.KindVersion},
		{"a call first", wire.FrameCall, []byte(`{"call":"list"}`), 0, wire.KindBadRequest},
		{"not JSON", wire.FrameHello, []byte("hello"), 0, wire.KindBadRequest},
		{"a Hello over its bound", wire.FrameHello, make([]byte, wire.MaxHello+1), 0, wire.KindBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("unix", wire.SocketPath(c.StateDir()))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			h := make([]byte, 5)
			h[0] = tc.typ
			binary.BigEndian.PutUint32(h[1:], uint32(len(tc.payload)))
			go nc.Write(append(h, tc.payload...))
			wc := wire.NewConn(nc)
			typ, b, err := wc.ReadFrame(wire.MaxControl)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if tc.welcome != 0 {
				var w wire.Welcome
				if typ != wire.FrameWelcome || wire.Decode(b, &w) != nil || w.Version != tc.welcome || w.Pid == 0 {
					t.Fatalf("got %q %s, want a Welcome of version %d", typ, b, tc.welcome)
				}
				// And the connection serves calls.
				if err := wc.WriteJSON(wire.FrameCall, wire.Call{Call: wire.CallStatus}); err != nil {
					t.Fatal(err)
				}
				if typ, b, err := wc.ReadFrame(wire.MaxControl); err != nil || typ != wire.FrameReply {
					t.Fatalf("status after the handshake: %q %s %v", typ, b, err)
				}
				return
			}
			var e wire.Error
			if typ != wire.FrameError || wire.Decode(b, &e) != nil || e.Kind != tc.kind || e.Message == "" {
				t.Fatalf("got %q %s, want an error of kind %s", typ, b, tc.kind)
			}
			t.Logf("%s: %s", e.Kind, e.Message)
			if _, _, err := wc.ReadFrame(wire.MaxControl); err == nil {
				t.Fatal("the connection stayed open after a refused handshake")
			}
		})
	}
}

// TestOpenRefusesALiveSocket: a socket something answers on is another
// daemon's: Open says so (ErrRunning, naming its pid) and leaves its pid
// file and socket alone.
func TestOpenRefusesALiveSocket(t *testing.T) {
	testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	lis, err := net.Listen("unix", wire.SocketPath(state))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	pidFile := filepath.Join(state, "daemon.pid")
	os.WriteFile(pidFile, []byte("4242\n"), 0o600)
	os.Chmod(state, 0o700)
	_, err = server.Open(server.Config{Config: daemon.Config{StateDir: state}})
	if !errors.Is(err, daemon.ErrRunning) || !strings.Contains(err.Error(), "4242") {
		t.Fatalf("Open beside a live socket: %v, want ErrRunning naming pid 4242", err)
	}
	if b, err := os.ReadFile(pidFile); err != nil || string(b) != "4242\n" {
		t.Errorf("the other daemon's pid file: %q %v", b, err)
	}
	if _, err := os.Stat(wire.SocketPath(state)); err != nil {
		t.Errorf("the other daemon's socket: %v", err)
	}
}
