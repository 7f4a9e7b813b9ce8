//go:build linux

package main

import (
	"encoding/binary"
	"net"
	"time"

	"github.com/corral-dev/corral/internal/wire"
)

// rawConn is a hand-made connection to the daemon of e, past its
// handshake: a test sends exactly the frames it makes.
func (e *daemonEnv) rawConn() *wire.Conn {
	e.t.Helper()
	nc, err := net.DialTimeout("unix", wire.SocketPath(e.state), 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	c := wire.NewConn(nc)
	if err := c.WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{wire.Version}}); err != nil {
		e.t.Fatal(err)
	}
	if typ, b, err := c.ReadFrame(wire.MaxControl); err != nil || typ != wire.FrameWelcome {
		e.t.Fatalf("handshake: %q %s %v", typ, b, err)
	}
	return c
}

// execCall sends an exec call of x on c.
func execCall(c *wire.Conn, x *wire.Exec) error {
	return c.WriteJSON(wire.FrameCall, wire.Call{Call: wire.CallExec, Exec: x})
}

// rawFrame writes a frame of any size (past what wire.Conn allows).
func rawFrame(c *wire.Conn, typ byte, payload []byte) error {
	h := make([]byte, 5, 5+len(payload))
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	_, err := c.Net().Write(append(h, payload...))
	return err
}

// callEnd reads frames until the call ends: its result, or its error
// frame, or the connection's error.
func callEnd(c *wire.Conn) (*wire.Result, *wire.Error, error) {
	for {
		typ, b, err := c.ReadFrame(wire.MaxControl)
		if err != nil {
			return nil, nil, err
		}
		switch typ {
		case wire.FrameReply:
			var r wire.Result
			if err := wire.Decode(b, &r); err != nil {
				return nil, nil, err
			}
			return &r, nil, nil
		case wire.FrameError:
			var e wire.Error
			if err := wire.Decode(b, &e); err != nil {
				return nil, nil, err
			}
			return nil, &e, nil
		}
	}
}
