//go:build linux

package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tlsdir"
	"github.com/corral-dev/corral/internal/wire"
)

// netPair is two network namespaces of a test's own joined by a veth
// pair: the daemon's (addr daemonIP) and the client's (clientIP).
type netPair struct {
	daemonNS, clientNS string
	daemonIP, clientIP string
	clientLink         string // the client's end of the veth pair
}

// newNetPair makes the namespaces and the link (10.231.X.{1,2}/30 of a
// random X: the addresses live in these namespaces only); t.Cleanup
// removes them. It skips the test if this is not root or ip is missing.
func newNetPair(t *testing.T) *netPair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing: %v", tool, err)
		}
	}
	var b [4]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:3])
	x := int(b[3])
	p := &netPair{daemonNS: "corral-" + id + "-d", clientNS: "corral-" + id + "-c",
		daemonIP: fmt.Sprintf("10.231.%d.1", x), clientIP: fmt.Sprintf("10.231.%d.2", x), clientLink: "cr" + id + "c"}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", p.daemonNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.daemonNS).Run() })
	ip("netns", "add", p.clientNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.clientNS).Run() })
	dl := "cr" + id + "d"
	ip("link", "add", dl, "netns", p.daemonNS, "type", "veth", "peer", "name", p.clientLink, "netns", p.clientNS)
	ip("-n", p.daemonNS, "addr", "add", p.daemonIP+"/30", "dev", dl)
	ip("-n", p.clientNS, "addr", "add", p.clientIP+"/30", "dev", p.clientLink)
	for _, l := range [][2]string{{p.daemonNS, dl}, {p.daemonNS, "lo"}, {p.clientNS, p.clientLink}, {p.clientNS, "lo"}} {
		ip("-n", l[0], "link", "set", l[1], "up")
	}
	return p
}

// inNS prepares corral with args in namespace ns (its network only:
// nsenter leaves the mounts, so /sys/fs/cgroup stays), marked, with state
// directory state. nsenter execs corral: the process is corral's.
func inNS(t *testing.T, mark, ns, state string, args ...string) *exec.Cmd {
	c := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + ns, "--", corralBin}, args...)...)
	c.Env = append(testproc.Env(mark), "CORRAL_STATE_DIR="+state)
	return c
}

// dialFrom opens a TCP connection to addr from namespace ns: the socket
// is made on a thread moved into ns, which then exits with its goroutine
// (a locked thread is not reused).
func dialFrom(t *testing.T, ns, addr string) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		done <- result{c, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("dial %s from %s: %v", addr, ns, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

// remoteEnv is a daemon serving TCP with TLS in one namespace of a pair,
// for clients in the other.
type remoteEnv struct {
	*daemonEnv
	net  *netPair
	ca   string // the CA directory (tls init), also the admin's credentials
	addr string // HOST:PORT of the daemon
	log  string // the daemon's stderr
	// daemon is the daemon process (nsenter execs corral: its pid is
	// the daemon's).
	daemon *exec.Cmd
}

const remotePort = "7443"

func newRemoteEnv(t *testing.T) *remoteEnv {
	t.Helper()
	p := newNetPair(t)
	e := &remoteEnv{net: p, ca: filepath.Join(t.TempDir(), "ca"), addr: net.JoinHostPort(p.daemonIP, remotePort)}
	// After the namespaces' cleanup is registered: the daemon is stopped
	// (and its sessions killed) first.
	e.daemonEnv = newDaemonEnv(t)
	e.log = filepath.Join(t.TempDir(), "daemon.log")
	if out, rc := e.runLocal("tls", "init", e.ca, "--host", p.daemonIP); rc != 0 {
		t.Fatalf("tls init: %s", out)
	}
	e.daemon = e.startDaemon(t)
	return e
}

// startDaemon starts the daemon in the daemon namespace and returns once
// it serves remote clients; the daemonEnv's cleanup stops it (daemon stop
// on its socket).
func (e *remoteEnv) startDaemon(t *testing.T) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(e.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	before := strings.Count(e.readLog(), "serving remote clients")
	d := inNS(t, e.mark, e.net.daemonNS, e.state, "daemon", "--listen", e.addr, "--tls", e.ca)
	d.Stdout, d.Stderr = logf, logf
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	go d.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if strings.Count(e.readLog(), "serving remote clients") > before {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not listen on %s:\n%s", e.addr, e.readLog())
		}
	}
}

func (e *remoteEnv) readLog() string {
	b, _ := os.ReadFile(e.log)
	return string(b)
}

// runLocal runs corral here (no namespace).
func (e *remoteEnv) runLocal(args ...string) (string, int) {
	out, errs, rc := e.run(args...)
	return out + errs, rc
}

// client prepares corral with args in the client's namespace, with
// credentials dir; CORRAL_CLIENT_ONLY is in its environment and nowhere
// else.
func (e *remoteEnv) client(dir string, args ...string) *exec.Cmd {
	argv := append([]string{args[0], "--host", e.addr, "--tls", dir}, args[1:]...)
	c := inNS(e.t, e.mark, e.net.clientNS, filepath.Join(e.t.TempDir(), "no-state"), argv...)
	c.Env = append(c.Env, "CORRAL_CLIENT_ONLY=1")
	c.Dir = "/tmp"
	return c
}

func (e *remoteEnv) remote(dir string, args ...string) (string, string, int) {
	return runCaptured(e.client(dir, args...))
}

// awaitLog waits for the daemon's log to hold every one of want in one
// line, and fails the test if it does not within 5s.
func (e *remoteEnv) awaitLog(t *testing.T, what string, want ...string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, line := range strings.Split(e.readLog(), "\n") {
			all := true
			for _, w := range want {
				all = all && strings.Contains(line, w)
			}
			if all {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log line with %q:\n%s", what, want, e.readLog())
		}
	}
}

// logValue is v as the daemon's text log writes it.
func logValue(v string) string {
	if strings.ContainsAny(v, " \"=") {
		return strconv.Quote(v)
	}
	return v
}

// clientDir writes a client directory holding the CA certificate of
// caDir and a client certificate for name signed by signer's CA (another
// CA makes a certificate the daemon does not know), valid from notBefore
// to notAfter.
func clientDir(t *testing.T, caDir, signer, name string, notBefore, notAfter time.Time) string {
	t.Helper()
	read := func(p string) *pem.Block {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", p)
		}
		return blk
	}
	ca, err := x509.ParseCertificate(read(filepath.Join(signer, tlsdir.CAFile)).Bytes)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(read(filepath.Join(signer, tlsdir.CAKeyFile)).Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	out := filepath.Join(t.TempDir(), name)
	os.Mkdir(out, 0o700)
	caPEM, _ := os.ReadFile(filepath.Join(caDir, tlsdir.CAFile))
	for f, b := range map[string][]byte{
		tlsdir.CAFile:        caPEM,
		tlsdir.ClientFile:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		tlsdir.ClientKeyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(filepath.Join(out, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestRemoteAcrossNamespaces: a daemon in one network namespace serves a
// client in another over TLS: exec, ls and kill work; a remote session
// starts in the daemon's home with the daemon's environment plus --env,
// nothing of the client's; the unix socket serves beside TCP; and every
// credential that is not good is refused, the client told, and the daemon
// logs the reason with the client's address.
func TestRemoteAcrossNamespaces(t *testing.T) {
	e := newRemoteEnv(t)
	home, _ := os.UserHomeDir()

	out, errs, rc := e.remote(e.ca, "exec", "--env", "GIVEN=yes", "-s", "s", "--",
		`pwd; echo "given=$GIVEN client=[$CORRAL_CLIENT_ONLY]"`)
	if want := home + "\ngiven=yes client=[]\n"; rc != 0 || out != want {
		t.Fatalf("remote exec: rc %d %q (want %q) %s\n%s", rc, out, want, errs, e.readLog())
	}
	e.awaitLog(t, "the connection", "remote client connected", "identity=admin", "remote="+e.net.clientIP+":")
	out, errs, rc = e.remote(e.ca, "exec", "--cwd", "/tmp", "--oneshot", "--", "pwd")
	if rc != 0 || out != "/tmp\n" {
		t.Fatalf("remote oneshot with --cwd: rc %d %q %s", rc, out, errs)
	}
	if out, errs, rc = e.remote(e.ca, "ls", "--json"); rc != 0 || !strings.Contains(out, `"name":"s"`) {
		t.Fatalf("remote ls: rc %d %q %s", rc, out, errs)
	}
	if out, errs, rc = e.remote(e.ca, "daemon", "status"); rc != 0 || !strings.Contains(out, "1 sessions") {
		t.Fatalf("remote daemon status: rc %d %q %s", rc, out, errs)
	}
	// The unix socket, beside TCP.
	if m := e.ls(); len(m) != 1 || m["s"].State != "up" {
		t.Fatalf("local ls beside TCP: %v", m)
	}
	if out, errs, rc = e.remote(e.ca, "kill", "s"); rc != 0 || out != "killed s\n" {
		t.Fatalf("remote kill: rc %d %q %s", rc, out, errs)
	}
	if m := e.ls(); len(m) != 0 {
		t.Fatalf("after the remote kill: %v", m)
	}

	refused := func(t *testing.T, what, dir, reason, wantMsg string) {
		t.Helper()
		_, errs, rc := e.remote(dir, "exec", "-s", "r", "--", "echo ran")
		if rc == 0 || !strings.Contains(errs, wantMsg) {
			t.Errorf("%s: rc %d, stderr %q (want %q)", what, rc, errs, wantMsg)
		}
		e.awaitLog(t, what, "remote connection refused", "remote="+e.net.clientIP+":", "reason="+logValue(reason))
	}
	t.Run("another CA", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "other")
		if out, rc := e.runLocal("tls", "init", other); rc != 0 {
			t.Fatal(out)
		}
		mallory := clientDir(t, e.ca, other, "mallory", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		// Go's TLS client offers no certificate the server's CA list does
		// not name: corral's client is refused for having none.
		refused(t, "another CA", mallory, string(tlsdir.ReasonNoCertificate), "refused this client's certificate")
		// A client that offers it anyway is refused for its CA.
		cert, err := tls.LoadX509KeyPair(filepath.Join(mallory, tlsdir.ClientFile), filepath.Join(mallory, tlsdir.ClientKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		tlsRefused(t, e, &cert)
		e.awaitLog(t, "another CA offered anyway", "remote connection refused", "remote="+e.net.clientIP+":",
			"reason="+logValue(string(tlsdir.ReasonUnknownCA)), "identity=mallory")
	})
	t.Run("expired", func(t *testing.T) {
		refused(t, "expired", clientDir(t, e.ca, e.ca, "old", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)),
			string(tlsdir.ReasonExpired), "refused this client's certificate")
	})
	t.Run("revoked after issue", func(t *testing.T) {
		bob := filepath.Join(t.TempDir(), "bob")
		if out, rc := e.runLocal("tls", "issue", e.ca, "--client", "bob", "--out", bob); rc != 0 {
			t.Fatal(out)
		}
		if out, errs, rc := e.remote(bob, "exec", "-s", "b", "--", "echo bob"); rc != 0 || out != "bob\n" {
			t.Fatalf("bob before the revocation: rc %d %q %s", rc, out, errs)
		}
		if out, rc := e.runLocal("tls", "revoke", e.ca, "bob"); rc != 0 {
			t.Fatal(out)
		}
		refused(t, "revoked", bob, string(tlsdir.ReasonRevoked), "refused this client's certificate")
		e.awaitLog(t, "revoked", "remote connection refused", "identity=bob")
	})
	t.Run("read-only identity", func(t *testing.T) {
		viewer := filepath.Join(t.TempDir(), "viewer")
		if out, rc := e.runLocal("tls", "issue", e.ca, "--client", "viewer", "--read-only", "--out", viewer); rc != 0 {
			t.Fatal(out)
		}
		if out, errs, rc := e.remote(viewer, "ls"); rc != 0 || !strings.Contains(out, "NAME") {
			t.Fatalf("read-only ls: rc %d %q %s", rc, out, errs)
		}
		for _, args := range [][]string{{"exec", "-s", "v", "--", "echo ran"}, {"kill", "--all"}, {"daemon", "stop"}} {
			out, errs, rc := e.remote(viewer, args...)
			if rc == 0 || strings.Contains(out, "ran") || !strings.Contains(errs, `identity "viewer" is read-only`) {
				t.Errorf("read-only %v: rc %d %q %q", args, rc, out, errs)
			}
		}
		e.awaitLog(t, "read-only", "request refused", `identity \"viewer\"`, "call=exec", "addr="+e.net.clientIP+":")
		if m := e.ls(); len(m) != 1 { // b, made by bob before his revocation
			t.Errorf("after the read-only client: %v", m)
		}
	})
	t.Run("openssl-made read-only client", func(t *testing.T) {
		// A client certificate made with openssl from the CA's files, its
		// read-only mark in the subject as the README tells.
		if _, err := exec.LookPath("openssl"); err != nil {
			t.Skip("no openssl on PATH")
		}
		d := filepath.Join(t.TempDir(), "osl")
		os.Mkdir(d, 0o700)
		os.WriteFile(filepath.Join(d, "ext.cnf"), []byte("[client]\nbasicConstraints = CA:FALSE\nkeyUsage = critical,digitalSignature\nextendedKeyUsage = clientAuth\n"), 0o600)
		for _, args := range [][]string{
			{"genpkey", "-algorithm", "ed25519", "-out", tlsdir.ClientKeyFile},
			{"req", "-new", "-key", tlsdir.ClientKeyFile, "-subj", "/CN=osl-viewer/OU=" + tlsdir.ReadOnlyOU, "-out", "c.csr"},
			{"x509", "-req", "-in", "c.csr", "-CA", filepath.Join(e.ca, tlsdir.CAFile), "-CAkey", filepath.Join(e.ca, tlsdir.CAKeyFile),
				"-set_serial", "0x3001", "-days", "1", "-extfile", "ext.cnf", "-extensions", "client", "-out", tlsdir.ClientFile},
		} {
			c := exec.Command("openssl", args...)
			c.Dir = d
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("openssl %v: %v\n%s", args, err, out)
			}
		}
		os.Chmod(filepath.Join(d, tlsdir.ClientKeyFile), 0o600)
		caPEM, _ := os.ReadFile(filepath.Join(e.ca, tlsdir.CAFile))
		os.WriteFile(filepath.Join(d, tlsdir.CAFile), caPEM, 0o644)
		if out, errs, rc := e.remote(d, "ls"); rc != 0 || !strings.Contains(out, "NAME") {
			t.Fatalf("openssl client ls: rc %d %q %s", rc, out, errs)
		}
		if out, errs, rc := e.remote(d, "exec", "-s", "v", "--", "echo ran"); rc == 0 || !strings.Contains(errs, `identity "osl-viewer" is read-only`) {
			t.Errorf("openssl read-only client exec: rc %d %q %q", rc, out, errs)
		}
	})
	t.Run("plaintext", func(t *testing.T) {
		// A corral client speaking the protocol without TLS is told, in
		// the protocol, what to do.
		c := dialFrom(t, e.net.clientNS, e.addr)
		wc := wire.NewConn(c)
		if err := wc.WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{wire.Version}}); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		typ, b, err := wc.ReadFrame(wire.MaxControl)
		if err != nil || typ != wire.FrameError || !strings.Contains(string(b), "--tls DIR") {
			t.Errorf("plaintext Hello: %q %s %v", typ, b, err)
		}
		e.awaitLog(t, "plaintext", "remote connection refused", "remote="+e.net.clientIP+":", "reason="+logValue(string(tlsdir.ReasonPlaintext)))
	})
	t.Run("no certificate", func(t *testing.T) {
		tlsRefused(t, e, nil)
		e.awaitLog(t, "no certificate", "remote connection refused", "remote="+e.net.clientIP+":", "reason="+logValue(string(tlsdir.ReasonNoCertificate)))
	})
	t.Run("slow handshake", func(t *testing.T) {
		// Connections that send nothing are dropped at the handshake
		// bound, and hold no serving slot meanwhile: the unix socket
		// serves. At most 16 of one address are in their handshake at
		// once (server.handshakesPerHost): a 17th waits its turn, and is
		// served once they are dropped.
		const perHost = 16
		var silent []net.Conn
		for range perHost {
			silent = append(silent, dialFrom(t, e.net.clientNS, e.addr))
		}
		start := time.Now()
		served := make(chan string, 1)
		go func() {
			out, errs, rc := e.remote(e.ca, "ls")
			served <- fmt.Sprintf("rc %d %q %s", rc, out, errs)
		}()
		if m := e.ls(); m == nil {
			t.Errorf("local ls beside the silent connections failed")
		}
		for _, c := range silent {
			c.SetReadDeadline(time.Now().Add(wire.HandshakeBound + 5*time.Second))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Errorf("a silent connection got data")
			}
		}
		if took := time.Since(start); took > wire.HandshakeBound+4*time.Second {
			t.Errorf("the silent connections were dropped only after %v (bound %v)", took, wire.HandshakeBound)
		}
		e.awaitLog(t, "slow handshake", "remote connection refused", "TLS handshake not done within")
		select {
		case got := <-served:
			if !strings.HasPrefix(got, "rc 0 ") {
				t.Errorf("the 17th connection, once the silent ones were dropped: %s", got)
			}
			t.Logf("the 17th connection was served %v after the silent ones were opened", time.Since(start))
		case <-time.After(10 * time.Second):
			t.Errorf("the 17th connection was not served 10s after the silent ones were dropped")
			<-served
		}
	})
}

// stoppedLine returns the daemon's log line saying that a client went
// away and its command was stopped (with stopped_in: from the daemon
// noticing to the tree gone), and fails the test if there is none or it
// took over 100 ms.
func (e *remoteEnv) stoppedLine(t *testing.T) string {
	t.Helper()
	e.awaitLog(t, "stopped", "client went away; its command was stopped", "remote="+e.net.clientIP+":")
	for _, line := range strings.Split(e.readLog(), "\n") {
		_, after, ok := strings.Cut(line, "stopped_in=")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(strings.Fields(after)[0])
		if err != nil || d > 100*time.Millisecond {
			t.Errorf("the tree was gone %v (%v) after the daemon noticed the client's loss (goal 100ms): %s", d, err, line)
		}
		return line
	}
	return ""
}

// tlsRefused does a TLS handshake with the daemon from the client
// namespace, offering cert (nil: none) whatever the daemon asks for, and
// fails the test unless the daemon refuses it.
func tlsRefused(t *testing.T, e *remoteEnv, cert *tls.Certificate) {
	t.Helper()
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(e.ca, tlsdir.CAFile))
	pool.AppendCertsFromPEM(caPEM)
	conf := &tls.Config{RootCAs: pool, ServerName: e.net.daemonIP, MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		}}
	tc := tls.Client(dialFrom(t, e.net.clientNS, e.addr), conf)
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	err := tc.Handshake()
	if err == nil {
		// TLS 1.3: the server's verdict comes with the first read.
		_, err = tc.Read(make([]byte, 1))
	}
	if err == nil {
		t.Errorf("the daemon let a client through with certificate %v", cert != nil)
	}
}

// startRemoteSleeper starts, in the client namespace, a remote exec whose
// command puts a background sleep in its tree (its pid in a file), says
// up, and sleeps; it returns the client, that pid once up, and the
// client's stderr (to read after the client's Wait).
func (e *remoteEnv) startRemoteSleeper(t *testing.T, session string) (*exec.Cmd, int, *strings.Builder) {
	t.Helper()
	bgFile := filepath.Join(e.state, "bg-"+session)
	c := e.client(e.ca, "exec", "-s", session, "--", "sleep 300 & echo $! > "+bgFile+"; echo up; sleep 300")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "up\n" {
		t.Fatalf("remote command: %q %v\n%s", line, err, e.readLog())
	}
	return c, testproc.PidFile(t, bgFile, 5*time.Second), &errb
}

// TestRemoteClientKilled: a remote client SIGKILLed mid-command has its
// command's whole tree stopped (the daemon sees the connection close),
// and the session serves the next call.
func TestRemoteClientKilled(t *testing.T) {
	e := newRemoteEnv(t)
	c, bg, _ := e.startRemoteSleeper(t, "k")
	start := time.Now()
	c.Process.Signal(syscall.SIGKILL)
	c.Wait()
	if !waitGone(bg, 10*time.Second) {
		t.Fatalf("the tree of a killed remote client outlived it (pid %d)\n%s", bg, e.readLog())
	}
	t.Logf("tree gone %v after the remote client was SIGKILLed", time.Since(start))
	t.Logf("daemon: %s", e.stoppedLine(t))
	if out, errs, rc := e.remote(e.ca, "exec", "-s", "k", "--", "echo next"); rc != 0 || out != "next\n" {
		t.Fatalf("next call: rc %d %q %s", rc, out, errs)
	}
}

// TestRemoteLinkCut: a remote client whose link goes down (no FIN, no
// RST: the daemon hears nothing) has its command's tree stopped once
// keepalive finds the peer dead, within the daemon's bound (10 s) plus
// the command's grace.
func TestRemoteLinkCut(t *testing.T) {
	e := newRemoteEnv(t)
	c, bg, _ := e.startRemoteSleeper(t, "cut")
	if out, err := exec.Command("ip", "-n", e.net.clientNS, "link", "set", e.net.clientLink, "down").CombinedOutput(); err != nil {
		t.Fatalf("link down: %v %s", err, out)
	}
	start := time.Now()
	if !waitGone(bg, 30*time.Second) {
		t.Fatalf("the tree of a cut-off remote client outlived it by 30s (pid %d)\n%s", bg, e.readLog())
	}
	took := time.Since(start)
	t.Logf("tree gone %v after the link went down", took)
	t.Logf("daemon: %s", e.stoppedLine(t))
	// The bound is the keepalive's (10 s) plus the grace (SIGTERM to a
	// sleep ends it at once): a generous margin for a loaded machine.
	if took > 10*time.Second+5*time.Second {
		t.Errorf("the tree was stopped %v after the link went down (bound 10s)", took)
	}
	// The client, cut off too, fails within its own keepalive bound.
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if exitCode(err) == 0 {
			t.Errorf("the cut-off client exited 0")
		}
	case <-time.After(20 * time.Second):
		t.Errorf("the cut-off client still waits 20s after the link went down")
		c.Process.Kill()
		<-done
	}
}

// TestRemoteDaemonKilled: a daemon SIGKILLed while a remote client's
// command runs: the client says it lost the daemon (exit 125), and the
// session survives: the next daemon takes it over, and a remote client
// uses it.
func TestRemoteDaemonKilled(t *testing.T) {
	e := newRemoteEnv(t)
	c, bg, errb := e.startRemoteSleeper(t, "live")
	e.daemon.Process.Signal(syscall.SIGKILL)
	if !waitGone(e.daemon.Process.Pid, 5*time.Second) {
		t.Fatal("the daemon did not die")
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if rc := exitCode(err); rc != exitInternal || !strings.Contains(errb.String(), "lost the daemon") {
			t.Errorf("the client of a killed daemon exited %d (want %d) saying %q", rc, exitInternal, errb.String())
		}
		t.Logf("the client of the killed daemon: %s", errb.String())
	case <-time.After(20 * time.Second):
		t.Fatal("the client of a killed daemon still waits after 20s")
	}
	if !testproc.Alive(bg) {
		t.Errorf("the session's command died with the daemon")
	}
	e.daemon = e.startDaemon(t)
	out, errs, rc := e.remote(e.ca, "ls", "--json")
	if rc != 0 || !strings.Contains(out, `"name":"live"`) {
		t.Fatalf("remote ls after the restart: rc %d %q %s", rc, out, errs)
	}
	if out, errs, rc := e.remote(e.ca, "kill", "live"); rc != 0 {
		t.Fatalf("remote kill after the restart: rc %d %q %s", rc, out, errs)
	}
	if !waitGone(bg, 5*time.Second) {
		t.Errorf("the session's tree outlived its kill (pid %d)", bg)
	}
}
