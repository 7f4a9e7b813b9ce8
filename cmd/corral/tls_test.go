//go:build linux

package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tlsdir"
)

// tlsCLI runs the built corral with args and returns its exit code, stdout
// and stderr.
func tlsCLI(t *testing.T, mark string, args ...string) (int, string, string) {
	t.Helper()
	out, errs, rc := runCaptured(cli(t, mark, t.TempDir(), args...))
	return rc, out, errs
}

// handshake serves one connection with the credentials of srvDir and
// connects to it with those of cliDir; it returns the identity the server
// saw, or the reason it refused.
func handshake(t *testing.T, srv *tls.Config, cliDir string) (tlsdir.Identity, tlsdir.Reason) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		id     tlsdir.Identity
		reason tlsdir.Reason
	}
	done := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- res{reason: tlsdir.ReasonHandshake}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, srv)
		if err := tc.Handshake(); err != nil {
			done <- res{reason: tlsdir.RefusalReason(err)}
			return
		}
		id, err := tlsdir.PeerIdentity(tc.ConnectionState())
		if err != nil {
			done <- res{reason: tlsdir.ReasonBadCert}
			return
		}
		tc.Write([]byte("ok\n"))
		done <- res{id: id}
	}()
	cfg, err := tlsdir.ClientConfig(cliDir, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
	if err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		bufio.NewReader(c).ReadString('\n')
		c.Close()
	}
	select {
	case r := <-done:
		return r.id, r.reason
	case <-time.After(15 * time.Second):
		t.Fatal("no handshake")
		return tlsdir.Identity{}, ""
	}
}

func TestTLSCommandsEndToEnd(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	base := t.TempDir()
	ca := filepath.Join(base, "ca")
	ro := filepath.Join(base, "ci")
	rw := filepath.Join(base, "ops")

	if code, out, errs := tlsCLI(t, mark, "tls", "init", ca, "--host", "localhost", "--host", "127.0.0.1"); code != 0 || !strings.Contains(out, `client "admin"`) {
		t.Fatalf("tls init: exit %d, %q, %q", code, out, errs)
	}
	if code, out, errs := tlsCLI(t, mark, "tls", "issue", ca, "--client", "ci", "--read-only", "--expires", "90d", "--out", ro); code != 0 || !strings.Contains(out, `"ci" (read-only`) {
		t.Fatalf("tls issue: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := tlsCLI(t, mark, "tls", "issue", ca, "--client", "ops", "--out", rw); code != 0 {
		t.Fatalf("tls issue: exit %d, %q", code, errs)
	}
	for _, p := range []string{ca, ro, rw} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want a 0700 directory", p, fi.Mode(), err)
		}
	}
	for _, p := range []string{filepath.Join(ca, "ca-key.pem"), filepath.Join(ca, "server-key.pem"),
		filepath.Join(ca, "client-key.pem"), filepath.Join(ro, "client-key.pem"), filepath.Join(rw, "client-key.pem")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want 0600", p, fi.Mode(), err)
		}
	}
	code, out, _ := tlsCLI(t, mark, "tls", "ls", ca)
	if code != 0 || !strings.Contains(out, "admin  read-write") || !strings.Contains(out, "ci     read-only") {
		t.Fatalf("tls ls: exit %d\n%s", code, out)
	}

	// What the CLI made, served and used: the init directory and a
	// client directory work alike.
	srv, err := tlsdir.ServerConfig(ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want tlsdir.Identity
	}{{ca, tlsdir.Identity{Name: "admin"}}, {ro, tlsdir.Identity{Name: "ci", ReadOnly: true}}, {rw, tlsdir.Identity{Name: "ops"}}} {
		if id, reason := handshake(t, srv, tc.dir); id != tc.want {
			t.Fatalf("%s: identity %+v (refused: %q), want %+v", tc.dir, id, reason, tc.want)
		}
	}
	// Revoked through the CLI, refused by the server already running.
	if code, out, errs := tlsCLI(t, mark, "tls", "revoke", ca, "ops"); code != 0 || !strings.Contains(out, `revoked "ops" serial`) {
		t.Fatalf("tls revoke: exit %d, %q, %q", code, out, errs)
	}
	if _, reason := handshake(t, srv, rw); reason != tlsdir.ReasonRevoked {
		t.Fatalf("revoked client: reason %q, want %q", reason, tlsdir.ReasonRevoked)
	}
	if id, _ := handshake(t, srv, ro); id.Name != "ci" {
		t.Fatalf("ci after revoking ops: %+v", id)
	}

	// Refusals, each with its exit code and a message that says what is wrong.
	keyBefore, _ := os.ReadFile(filepath.Join(ca, "ca-key.pem"))
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"tls", "init", ca}, 1, "already holds a CA"},
		{[]string{"tls", "init", filepath.Join(base, "x"), "--host", "bad host"}, 2, `host "bad host"`},
		{[]string{"tls", "init", filepath.Join(base, "x"), "--host", "300.1.1.1"}, 2, `host "300.1.1.1"`},
		{[]string{"tls", "init", filepath.Join(base, "x"), "--expires", "forever"}, 2, "--expires"},
		{[]string{"tls", "init"}, 2, "accepts 1 arg"},
		{[]string{"tls", "issue", ca, "--client", "a/b", "--out", filepath.Join(base, "y")}, 2, `client name "a/b"`},
		{[]string{"tls", "issue", ca, "--client", "ok", "--out", filepath.Join(base, "y"), "--expires", "-1d"}, 2, "--expires"},
		{[]string{"tls", "issue", ca, "--out", filepath.Join(base, "y")}, 2, "--client NAME is required"},
		{[]string{"tls", "issue", ca, "--client", "ok"}, 2, "--out CLIENTDIR is required"},
		{[]string{"tls", "issue", ca, "--client", "ok", "--out", ro}, 1, "already holds client credentials"},
		{[]string{"tls", "issue", filepath.Join(base, "none"), "--client", "ok", "--out", filepath.Join(base, "y")}, 125, "no such file"},
		{[]string{"tls", "revoke", ca, "nobody"}, 1, "no certificate issued under that name"},
		{[]string{"tls", "revoke", ca, "ops"}, 1, "already revoked"},
		{[]string{"tls", "revoke", ca, "bad name"}, 2, `client name "bad name"`},
		{[]string{"tls", "revoke", ca}, 2, "accepts 2 arg"},
		{[]string{"tls", "bogus"}, 2, ""},
	} {
		code, _, errs := tlsCLI(t, mark, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.msg) || strings.Count(errs, "\n") != 1 {
			t.Errorf("corral %q: exit %d, stderr %q; want %d and one line with %q", tc.args, code, errs, tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "x")); err == nil {
		t.Error("a refused tls init created its directory")
	}
	if _, err := os.Stat(filepath.Join(base, "y")); err == nil {
		t.Error("a refused tls issue created its directory")
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(ca, "ca-key.pem")); !bytes.Equal(keyAfter, keyBefore) {
		t.Fatal("a refused tls init changed the CA")
	}
	// --force replaces the CA: every certificate of the old one is refused.
	if code, _, errs := tlsCLI(t, mark, "tls", "init", ca, "--force"); code != 0 {
		t.Fatalf("tls init --force: exit %d, %q", code, errs)
	}
	srv, err = tlsdir.ServerConfig(ca)
	if err != nil {
		t.Fatal(err)
	}
	// (The old client trusts only the old CA, so it is the one to abort.)
	if id, reason := handshake(t, srv, ro); reason == tlsdir.ReasonNone || id.Name != "" {
		t.Fatalf("old CA's client after --force: %+v let in", id)
	}
	if id, _ := handshake(t, srv, ca); id.Name != "admin" {
		t.Fatalf("new CA's client after --force: %+v", id)
	}
}
