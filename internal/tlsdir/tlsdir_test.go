package tlsdir

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// outcome is what the test server learnt of one connection.
type outcome struct {
	reason  Reason
	id      Identity
	err     error
	resumed bool
}

// server is a TLS server on 127.0.0.1 that handshakes each connection with
// its config, reports the outcome, and answers an accepted client with
// "NAME ro=BOOL\n".
type server struct {
	addr string
	out  chan outcome
}

// serve starts a server with cfg; it is stopped and waited for at cleanup.
func serve(t testing.TB, cfg *tls.Config) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String(), out: make(chan outcome, 16)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				tc := tls.Server(c, cfg)
				err := tc.Handshake()
				o := outcome{reason: RefusalReason(err), err: err}
				if err == nil {
					o.id, o.err = PeerIdentity(tc.ConnectionState())
					o.resumed = tc.ConnectionState().DidResume
					if o.err == nil {
						fmt.Fprintf(tc, "%s ro=%v\n", o.id.Name, o.id.ReadOnly)
					}
				}
				select {
				case s.out <- o:
				default:
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return s
}

// next returns the outcome of the server's next connection.
func (s *server) next(t testing.TB) outcome {
	t.Helper()
	select {
	case o := <-s.out:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("the server saw no connection")
		return outcome{}
	}
}

// talk connects with cfg and returns the server's greeting or the client's
// error: with TLS 1.3 a refused client certificate shows as an alert on the
// first read, after the client's own handshake succeeded.
func talk(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

func newCA(t testing.TB, opts InitOptions) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	if err := Init(dir, opts); err != nil {
		t.Fatal(err)
	}
	return dir
}

func clientConfig(t testing.TB, dir string) *tls.Config {
	t.Helper()
	cfg, err := ClientConfig(dir, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func serverConfig(t testing.TB, dir string) *tls.Config {
	t.Helper()
	cfg, err := ServerConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func issueTo(t testing.TB, dir, name string, opts IssueOptions) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	if _, err := Issue(dir, name, opts, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// expectAccepted checks that cfg's client gets in as want.
func expectAccepted(t *testing.T, s *server, cfg *tls.Config, want Identity) {
	t.Helper()
	got, err := talk(s.addr, cfg)
	o := s.next(t)
	if o.err != nil || o.id != want {
		t.Fatalf("server: %+v, want %+v accepted", o, want)
	}
	if wantLine := fmt.Sprintf("%s ro=%v\n", want.Name, want.ReadOnly); err != nil || got != wantLine {
		t.Fatalf("client read %q, %v; want %q", got, err, wantLine)
	}
}

// expectRefused checks that cfg's client is refused for reason, on both
// sides.
func expectRefused(t *testing.T, s *server, cfg *tls.Config, reason Reason) {
	t.Helper()
	got, err := talk(s.addr, cfg)
	o := s.next(t)
	if o.reason != reason {
		t.Fatalf("server: reason %q (%v), want %q", o.reason, o.err, reason)
	}
	name, _, named := RefusedName(o.err)
	if presented := len(cfg.Certificates) > 0 || cfg.GetClientCertificate != nil; named != (presented && reason != ReasonHandshake && reason != ReasonNoCertificate) {
		t.Errorf("RefusedName: %q, %v for a %q refusal", name, named, reason)
	}
	if err == nil {
		t.Fatalf("client read %q: it was let in", got)
	}
}

func TestClientAcceptedWithIdentity(t *testing.T) {
	ca := newCA(t, InitOptions{})
	s := serve(t, serverConfig(t, ca))
	expectAccepted(t, s, clientConfig(t, ca), Identity{Name: DefaultClient})
	ro := issueTo(t, ca, "ci-runner.1", IssueOptions{ReadOnly: true})
	expectAccepted(t, s, clientConfig(t, ro), Identity{Name: "ci-runner.1", ReadOnly: true})
	rw := issueTo(t, ca, "ops", IssueOptions{})
	expectAccepted(t, s, clientConfig(t, rw), Identity{Name: "ops"})
	// By IP address, which the default server certificate names too.
	cfg := clientConfig(t, rw)
	cfg.ServerName = "127.0.0.1"
	expectAccepted(t, s, cfg, Identity{Name: "ops"})
}

func TestRefusals(t *testing.T) {
	ca := newCA(t, InitOptions{})
	s := serve(t, serverConfig(t, ca))
	good := clientConfig(t, ca)

	t.Run("plaintext", func(t *testing.T) {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
		if o := s.next(t); o.reason != ReasonPlaintext {
			t.Fatalf("reason %q (%v), want %q", o.reason, o.err, ReasonPlaintext)
		}
	})
	t.Run("no certificate", func(t *testing.T) {
		cfg := good.Clone()
		cfg.Certificates = nil
		expectRefused(t, s, cfg, ReasonNoCertificate)
	})
	t.Run("unknown CA", func(t *testing.T) {
		other := newCA(t, InitOptions{})
		cfg := clientConfig(t, other)
		cfg.RootCAs = good.RootCAs // it trusts our server; we do not trust its CA
		// A Go client sends no certificate that the server's list of
		// acceptable authorities does not name...
		expectRefused(t, s, cfg, ReasonNoCertificate)
		// ...other clients (and this one, made to) send it anyway.
		cert := cfg.Certificates[0]
		cfg.Certificates = nil
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		expectRefused(t, s, cfg, ReasonUnknownCA)
	})
	t.Run("expired", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "old")
		now := time.Now()
		if _, err := issue(ca, Identity{Name: "old"}, now.Add(-48*time.Hour), now.Add(-time.Hour), out); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, s, clientConfig(t, out), ReasonExpired)
		talk(s.addr, clientConfig(t, out))
		if name, _, _ := RefusedName(s.next(t).err); name != "old" {
			t.Fatalf("RefusedName of an expired certificate: %q, want \"old\"", name)
		}
	})
	t.Run("not yet valid", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "future")
		now := time.Now()
		if _, err := issue(ca, Identity{Name: "future"}, now.Add(time.Hour), now.Add(48*time.Hour), out); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, s, clientConfig(t, out), ReasonExpired)
	})
	t.Run("revoked", func(t *testing.T) {
		out := issueTo(t, ca, "gone", IssueOptions{})
		if _, err := Revoke(ca, "gone"); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, s, clientConfig(t, out), ReasonRevoked)
	})
	t.Run("server certificate as client", func(t *testing.T) {
		cert, err := loadPair(filepath.Join(ca, ServerFile), filepath.Join(ca, ServerKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		cfg := good.Clone()
		cfg.Certificates = []tls.Certificate{cert}
		expectRefused(t, s, cfg, ReasonBadCert) // no client-auth key usage
	})
	t.Run("TLS 1.2", func(t *testing.T) {
		cfg := good.Clone()
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		expectRefused(t, s, cfg, ReasonHandshake)
	})
	// And the good client still gets in after all that.
	expectAccepted(t, s, good, Identity{Name: DefaultClient})
}

func TestRevokeTakesEffectOnRunningServer(t *testing.T) {
	ca := newCA(t, InitOptions{})
	s := serve(t, serverConfig(t, ca))
	a := clientConfig(t, issueTo(t, ca, "alice", IssueOptions{}))
	b := clientConfig(t, issueTo(t, ca, "bob", IssueOptions{ReadOnly: true}))
	expectAccepted(t, s, a, Identity{Name: "alice"})
	expectAccepted(t, s, b, Identity{Name: "bob", ReadOnly: true})

	// A renewal: a second certificate under the same name.
	a2 := clientConfig(t, issueTo(t, ca, "alice", IssueOptions{}))
	revoked, err := Revoke(ca, "alice")
	if err != nil || len(revoked) != 2 {
		t.Fatalf("Revoke: %v, %v; want both of alice's certificates", revoked, err)
	}
	expectRefused(t, s, a, ReasonRevoked)
	expectRefused(t, s, a2, ReasonRevoked)
	expectAccepted(t, s, b, Identity{Name: "bob", ReadOnly: true})

	if _, err := Revoke(ca, "bob"); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, s, b, ReasonRevoked)
	if _, err := Revoke(ca, "bob"); !errors.Is(err, ErrAlreadyRevoked) {
		t.Fatalf("second Revoke: %v, want ErrAlreadyRevoked", err)
	}
	if _, err := Revoke(ca, "carol"); !errors.Is(err, ErrUnknownName) {
		t.Fatalf("Revoke of a name never issued: %v, want ErrUnknownName", err)
	}
	// A new server reads the same list.
	s2 := serve(t, serverConfig(t, ca))
	expectRefused(t, s2, a, ReasonRevoked)
	expectAccepted(t, s2, clientConfig(t, ca), Identity{Name: DefaultClient})

	list, err := List(ca)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, is := range list {
		names = append(names, fmt.Sprintf("%s:%v", is.Name, is.RevokedAt != nil))
	}
	if got := strings.Join(names, " "); got != "admin:false alice:true bob:true alice:true" {
		t.Fatalf("index: %s", got)
	}
}

func TestUnusableRevocationListRefusesEveryone(t *testing.T) {
	ca := newCA(t, InitOptions{})
	s := serve(t, serverConfig(t, ca))
	good := clientConfig(t, ca)
	crl := filepath.Join(ca, CRLFile)
	saved, err := os.ReadFile(crl)
	if err != nil {
		t.Fatal(err)
	}
	other := newCA(t, InitOptions{})
	foreign, err := os.ReadFile(filepath.Join(other, CRLFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, []byte("garbage"), saved[:len(saved)/2], foreign} {
		if err := writeFile(crl, bad, 0o644, true); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, s, good, ReasonCRLUnusable)
	}
	os.Remove(crl)
	expectRefused(t, s, good, ReasonCRLUnusable)
	if _, err := ServerConfig(ca); err == nil {
		t.Fatal("ServerConfig started without a revocation list")
	}
	if err := writeFile(crl, saved, 0o644, true); err != nil {
		t.Fatal(err)
	}
	expectAccepted(t, s, good, Identity{Name: DefaultClient})
}

func TestFilesAndPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no unix permissions on Windows")
	}
	ca := newCA(t, InitOptions{Hosts: []string{"corral.example", "10.1.2.3"}})
	out := issueTo(t, ca, "ci", IssueOptions{ReadOnly: true, Validity: 48 * time.Hour})
	check := func(path string, want os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
	}
	check(ca, 0o700)
	check(out, 0o700)
	for _, f := range []string{CAKeyFile, ServerKeyFile, ClientKeyFile, IndexFile} {
		check(filepath.Join(ca, f), 0o600)
	}
	check(filepath.Join(out, ClientKeyFile), 0o600)
	for _, f := range []string{CAFile, ServerFile, ClientFile, CRLFile} {
		check(filepath.Join(ca, f), 0o644)
	}
	for _, f := range []string{CAFile, ClientFile} {
		check(filepath.Join(out, f), 0o644)
	}
	if left, _ := filepath.Glob(filepath.Join(ca, ".*tmp*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	srv, err := parseCertFile(filepath.Join(ca, ServerFile))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(srv.DNSNames, srv.IPAddresses) != "[corral.example] [10.1.2.3]" {
		t.Errorf("server certificate names %v %v", srv.DNSNames, srv.IPAddresses)
	}
	cli, err := parseCertFile(filepath.Join(out, ClientFile))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(cli.NotAfter); d < 47*time.Hour || d > 49*time.Hour {
		t.Errorf("client certificate expires in %v, want 48h", d)
	}

	// An existing CA is not replaced unless asked, and nothing of it changes.
	before, _ := os.ReadFile(filepath.Join(ca, CAKeyFile))
	if err := Init(ca, InitOptions{}); !errors.Is(err, ErrExists) {
		t.Fatalf("Init over a CA: %v, want ErrExists", err)
	}
	if after, _ := os.ReadFile(filepath.Join(ca, CAKeyFile)); string(after) != string(before) {
		t.Fatal("a refused Init changed the CA key")
	}
	// Nor are a client directory's credentials.
	if _, err := Issue(ca, "ci2", IssueOptions{}, out); !errors.Is(err, ErrExists) {
		t.Fatalf("Issue into a client directory: %v, want ErrExists", err)
	}
	if err := Init(ca, InitOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(ca, CAKeyFile)); string(after) == string(before) {
		t.Fatal("Init with Force kept the old CA key")
	}
	if list, _ := List(ca); len(list) != 1 {
		t.Fatalf("index after a forced Init: %v", list)
	}

	// A key others can read is refused, not fixed.
	os.Chmod(filepath.Join(out, ClientKeyFile), 0o644)
	if _, err := ClientConfig(out, "localhost"); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("ClientConfig with a 0644 key: %v, want ErrUnsafe", err)
	}
	// So is a directory others can enter, or a symlink to one.
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o755)
	if err := Init(open, InitOptions{}); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Init in a 0755 directory: %v, want ErrUnsafe", err)
	}
	if os.Geteuid() == 0 {
		// Another user's directory, closed or not, is refused, not taken.
		theirs := filepath.Join(t.TempDir(), "theirs")
		os.Mkdir(theirs, 0o700)
		os.Chown(theirs, 65534, 65534)
		if err := Init(theirs, InitOptions{}); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("Init in a directory of uid 65534: %v, want ErrUnsafe", err)
		}
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(ca, link)
	if _, err := Issue(link, "x", IssueOptions{}, filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Issue through a symlink: %v, want ErrUnsafe", err)
	}
	// Credentials are read through a symlink and from a directory others
	// may enter (a mounted secret), not from one others may write to.
	if _, err := ServerConfig(link); err != nil {
		t.Fatalf("ServerConfig through a symlink: %v", err)
	}
	os.Chmod(ca, 0o755)
	if _, err := ServerConfig(ca); err != nil {
		t.Fatalf("ServerConfig in a 0755 directory: %v", err)
	}
	os.Chmod(ca, 0o775)
	if _, err := ServerConfig(ca); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("ServerConfig in a 0775 directory: %v, want ErrUnsafe", err)
	}
	os.Chmod(ca, 0o700)
	os.Chmod(filepath.Join(ca, ServerKeyFile), 0o640)
	if _, err := ServerConfig(ca); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("ServerConfig with a 0640 key: %v, want ErrUnsafe", err)
	}
}

func TestConcurrentIssuesAllRecorded(t *testing.T) {
	ca := newCA(t, InitOptions{})
	base := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", i)
			_, err := Issue(ca, name, IssueOptions{}, filepath.Join(base, name))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	list, err := List(ca)
	if err != nil || len(list) != 9 {
		t.Fatalf("index holds %d certificates (%v), want admin and 8 issued at once", len(list), err)
	}
}

func TestBadInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	for _, h := range []string{"bad host", "-x.example", "a..b", "300.1.2.3", "", "x_y.example"} {
		if err := Init(dir, InitOptions{Hosts: []string{h}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Init --host %q: %v, want ErrInvalid", h, err)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("a refused Init created the directory")
	}
	ca := newCA(t, InitOptions{})
	for _, n := range []string{"", "a b", "../x", "-x", "é", strings.Repeat("a", 65), "a\nb"} {
		if _, err := Issue(ca, n, IssueOptions{}, filepath.Join(t.TempDir(), "c")); !errors.Is(err, ErrInvalid) {
			t.Errorf("Issue %q: %v, want ErrInvalid", n, err)
		}
		if _, err := Revoke(ca, n); !errors.Is(err, ErrInvalid) {
			t.Errorf("Revoke %q: %v, want ErrInvalid", n, err)
		}
	}
	if _, err := Issue(filepath.Join(t.TempDir(), "none"), "x", IssueOptions{}, filepath.Join(t.TempDir(), "c")); err == nil {
		t.Error("Issue from a directory without a CA succeeded")
	}
}

// TestRevokedClientCannotResume checks that a session ticket issued before
// a revocation does not let the client back in: the check runs on resumed
// handshakes too.
func TestRevokedClientCannotResume(t *testing.T) {
	ca := newCA(t, InitOptions{})
	s := serve(t, serverConfig(t, ca))
	cfg := clientConfig(t, issueTo(t, ca, "roamer", IssueOptions{}))
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	expectAccepted(t, s, cfg, Identity{Name: "roamer"})
	got, err := talk(s.addr, cfg)
	if o := s.next(t); err != nil || o.err != nil || !o.resumed {
		t.Fatalf("second connection: %q, %v, %+v; want a resumed session", got, err, o)
	}
	if _, err := Revoke(ca, "roamer"); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, s, cfg, ReasonRevoked)
}
