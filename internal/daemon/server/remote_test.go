//go:build linux

package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tlsdir"
	"github.com/corral-dev/corral/internal/wire"
)

// remoteDaemon is a daemon served in this process on its socket and on
// TCP (loopback) with the TLS credentials of a fresh CA.
type remoteDaemon struct {
	state, ca, addr string
	log             *testproc.Buffer
}

func serveRemote(t testing.TB) *remoteDaemon {
	t.Helper()
	r := &remoteDaemon{state: t.TempDir(), ca: filepath.Join(t.TempDir(), "ca"), log: &testproc.Buffer{}}
	if err := tlsdir.Init(r.ca, tlsdir.InitOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	s, err := server.Open(server.Config{Config: daemon.Config{StateDir: r.state, Log: slog.New(slog.NewTextHandler(r.log, nil))},
		Listen: "127.0.0.1:0", TLSDir: r.ca})
	if err != nil {
		t.Fatal(err)
	}
	r.addr = s.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	t.Cleanup(func() {
		if c, err := client.Dial(context.Background(), r.state); err == nil {
			c.Kill(context.Background(), true)
			c.Close()
		}
		cancel()
		<-served
	})
	return r
}

func (r *remoteDaemon) dial(t testing.TB, dir string) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), r.addr, client.TLS(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRemoteExecStartsFromTheDaemonsHomeAndEnvironment: a remote client's
// session starts in the daemon's home with the daemon's environment plus
// only what the client gave (--env): nothing of the client's own cwd or
// environment; the unix socket serves beside TCP; a read-only identity
// lists but may not exec, kill or stop, and is told so by name.
func TestRemoteExecStartsFromTheDaemonsHomeAndEnvironment(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	r := serveRemote(t)
	c := r.dial(t, r.ca)
	var out bytes.Buffer
	_, err := c.Exec(context.Background(), "s", `pwd; echo "given=$GIVEN"`, client.ExecOptions{Stdout: &out,
		Env: []string{mark, "GIVEN=yes"}})
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	if want := home + "\ngiven=yes\n"; out.String() != want {
		t.Fatalf("remote session: %q, want %q", out.String(), want)
	}
	// The unix socket, beside it, sees the same session.
	local, err := client.Dial(context.Background(), r.state)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	list, err := local.List(context.Background())
	if err != nil || len(list) != 1 || list[0].Name != "s" {
		t.Fatalf("local ls: %v %v", list, err)
	}
	// A remote --cwd must be absolute.
	if _, err := c.Exec(context.Background(), "s", "true", client.ExecOptions{Cwd: "rel"}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("relative remote cwd: %v", err)
	}

	viewer := filepath.Join(t.TempDir(), "viewer")
	if _, err := tlsdir.Issue(r.ca, "viewer", tlsdir.IssueOptions{ReadOnly: true}, viewer); err != nil {
		t.Fatal(err)
	}
	v := r.dial(t, viewer)
	if list, err := v.List(context.Background()); err != nil || len(list) != 1 {
		t.Fatalf("read-only ls: %v %v", list, err)
	}
	if _, err := v.Status(context.Background()); err != nil {
		t.Fatalf("read-only status: %v", err)
	}
	_, err = v.Exec(context.Background(), "s", "echo should-not-run", client.ExecOptions{Env: []string{mark}})
	if !errors.Is(err, client.ErrPermission) || !strings.Contains(err.Error(), `"viewer"`) {
		t.Fatalf("read-only exec: %v", err)
	}
	if _, err := v.Kill(context.Background(), false, "s"); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("read-only kill: %v", err)
	}
	if err := v.Stop(context.Background()); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("read-only stop: %v", err)
	}
	if _, err := c.Exec(context.Background(), "s", "true", client.ExecOptions{}); err != nil {
		t.Fatalf("the session after the refusals: %v", err)
	}
	if log := r.log.String(); !strings.Contains(log, `peer="identity \"viewer\""`) {
		t.Errorf("the refusals are not logged with the identity:\n%s", log)
	}
}

// BenchmarkRemoteExec: a warm exec of true over mutual TLS (one
// connection reused) against the same over the unix socket, in one run;
// and a fresh connection (TCP connect, TLS handshake, corral handshake)
// against a fresh unix one.
func BenchmarkRemoteExec(b *testing.B) {
	mark := testproc.Guard(b, 5*time.Minute)
	r := serveRemote(b)
	remote := r.dial(b, r.ca)
	local, err := client.Dial(context.Background(), r.state)
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	// Both sessions get the same environment: the remote one the
	// daemon's (this process's) plus the marker, the local one that given
	// whole. (The shell's exported environment is read back after every
	// command, so its size is part of the cost.)
	run := func(b *testing.B, c *client.Client, session string, env []string) {
		o := client.ExecOptions{Env: env}
		if _, err := c.Exec(context.Background(), session, "true", o); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Exec(context.Background(), session, "true", o); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("exec/unix", func(b *testing.B) { run(b, local, "u", append(os.Environ(), mark)) })
	b.Run("exec/tls", func(b *testing.B) { run(b, remote, "r", []string{mark}) })
	b.Run("connect/unix", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, err := client.Dial(context.Background(), r.state)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("connect/tcp", func(b *testing.B) {
		// A plain TCP connect and close, no TLS: the baseline of the
		// handshake's cost (the daemon logs each as a failed handshake).
		for i := 0; i < b.N; i++ {
			nc, err := net.Dial("tcp", r.addr)
			if err != nil {
				b.Fatal(err)
			}
			nc.Close()
		}
	})
	b.Run("connect/tls", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, err := client.Dial(context.Background(), r.addr, client.TLS(r.ca))
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}

// BenchmarkRemoteOutput: a command's output streamed over mutual TLS
// against the same over the unix socket, and against a plain copy over a
// crypto/tls connection with the same credentials, in one run (MB/s).
func BenchmarkRemoteOutput(b *testing.B) {
	mark := testproc.Guard(b, 5*time.Minute)
	r := serveRemote(b)
	remote := r.dial(b, r.ca)
	local, err := client.Dial(context.Background(), r.state)
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	const size = 64 << 20
	code := fmt.Sprintf("head -c %d /dev/zero", size)
	run := func(b *testing.B, c *client.Client, session string, env []string) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			var n countWriter
			if _, err := c.Exec(context.Background(), session, code, client.ExecOptions{Stdout: &n, Env: env}); err != nil || n != size {
				b.Fatalf("%d bytes, %v", n, err)
			}
		}
	}
	b.Run("unix", func(b *testing.B) { run(b, local, "u", append(os.Environ(), mark)) })
	b.Run("tls", func(b *testing.B) { run(b, remote, "r", []string{mark}) })
	b.Run("tls-copy", func(b *testing.B) {
		sconf, err := tlsdir.ServerConfig(r.ca)
		if err != nil {
			b.Fatal(err)
		}
		cconf, err := tlsdir.ClientConfig(r.ca, "127.0.0.1")
		if err != nil {
			b.Fatal(err)
		}
		lis, err := tls.Listen("tcp", "127.0.0.1:0", sconf)
		if err != nil {
			b.Fatal(err)
		}
		defer lis.Close()
		served := make(chan struct{})
		go func() {
			defer close(served)
			buf := make([]byte, wire.MaxOutputChunk)
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				for left := size; left > 0; left -= len(buf) {
					if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
						break
					}
				}
				c.Close()
			}
		}()
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			c, err := tls.Dial("tcp", lis.Addr().String(), cconf)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			if n != size {
				b.Fatalf("%d bytes", n)
			}
		}
		lis.Close()
		<-served
	})
}

type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) { *w += countWriter(len(p)); return len(p), nil }

// TestRemoteRevokedMidConnection: a certificate revoked while its client
// holds a connection serves no further call on it: the next call is
// refused (kind permission, saying revoked), and the daemon logs it.
// Before the check at each call, the connection made before the
// revocation went on serving.
func TestRemoteRevokedMidConnection(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	r := serveRemote(t)
	carol := filepath.Join(t.TempDir(), "carol")
	if _, err := tlsdir.Issue(r.ca, "carol", tlsdir.IssueOptions{}, carol); err != nil {
		t.Fatal(err)
	}
	c := r.dial(t, carol)
	o := client.ExecOptions{Env: []string{mark}}
	if _, err := c.Exec(context.Background(), "s", "true", o); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsdir.Revoke(r.ca, "carol"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Exec(context.Background(), "s", "echo ran", o)
	if !errors.Is(err, client.ErrPermission) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a call after the revocation, on the connection made before: %v", err)
	}
	if log := r.log.String(); !strings.Contains(log, "reason=revoked") || !strings.Contains(log, "identity=carol") {
		t.Errorf("the refusal is not logged:\n%s", log)
	}
}

// TestRemoteConcurrentExecs: 200 execs at once from one client over TLS,
// spread over 20 sessions (more connections than the daemon serves at
// once, and than one address may have in its handshake): each gets its
// own output whole, none hangs, none is refused.
func TestRemoteConcurrentExecs(t *testing.T) {
	mark := testproc.Guard(t, 120*time.Second)
	r := serveRemote(t)
	c := r.dial(t, r.ca)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n, sessions = 200, 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var out bytes.Buffer
			r, err := c.Exec(ctx, fmt.Sprintf("s%d", i%sessions), fmt.Sprintf("echo begin-%d; sleep 0.01; echo end-%d", i, i),
				client.ExecOptions{Stdout: &out, Env: []string{mark}})
			if err != nil && r != nil && r.Error != "" {
				err = fmt.Errorf("exec %d: %w (%s)", i, err, r.Error)
			}
			if want := fmt.Sprintf("begin-%d\nend-%d\n", i, i); err == nil && out.String() != want {
				err = fmt.Errorf("exec %d: output %q, want %q", i, out.String(), want)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
