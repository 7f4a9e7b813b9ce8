package tlsdir

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// ServerConfig returns the TLS configuration of a daemon serving with the
// credentials of dir: TLS 1.3 only, the server certificate of dir, and a
// client certificate required, verified against dir's ca.pem (chain,
// client-auth key usage, validity) and checked against dir's crl.pem.
//
// The revocation list is checked on every handshake, resumed ones
// included, and reread whenever the file changed (a stat per handshake:
// see BenchmarkHandshake), so Revoke takes effect on a running server
// without a restart; connections already established are not cut. If
// crl.pem is missing, corrupt or not signed by the CA the server refuses
// every client (ReasonCRLUnusable) until it is fixed: it fails closed.
//
// A refused handshake's error is classified by RefusalReason.
func ServerConfig(dir string) (*tls.Config, error) {
	pool, ca, cert, err := readCredentials(dir, ServerFile, ServerKeyFile)
	if err != nil {
		return nil, err
	}
	rl := &revocations{path: filepath.Join(dir, CRLFile), ca: ca}
	if err := rl.refresh(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		// Go verifies a certificate that is given (chain to ClientCAs,
		// client-auth usage, validity: a *tls.CertificateVerificationError
		// on failure); VerifyConnection refuses a missing one. With
		// RequireAndVerifyClientCert a missing certificate would fail
		// with an error that can only be told apart by its text.
		ClientAuth:       tls.VerifyClientCertIfGiven,
		VerifyConnection: rl.verify,
	}, nil
}

// ClientConfig returns the TLS configuration of a client using the
// credentials of dir (ca.pem, client.pem, client-key.pem: a directory made
// by Init or by Issue) to reach serverName, a DNS name or IP address the
// server certificate is valid for.
func ClientConfig(dir, serverName string) (*tls.Config, error) {
	pool, _, cert, err := readCredentials(dir, ClientFile, ClientKeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   serverName,
	}, nil
}

// PeerIdentity returns the identity of the client of a connection served
// with ServerConfig, from its verified certificate. It fails for a
// connection whose client certificate was not verified.
func PeerIdentity(state tls.ConnectionState) (Identity, error) {
	if !state.HandshakeComplete || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return Identity{}, errors.New("tls: no verified client certificate")
	}
	return identityOf(state.VerifiedChains[0][0])
}

func identityOf(c *x509.Certificate) (Identity, error) {
	id := Identity{Name: c.Subject.CommonName, ReadOnly: slices.Contains(c.Subject.OrganizationalUnit, ReadOnlyOU)}
	if err := CheckName(id.Name); err != nil {
		return Identity{}, fmt.Errorf("tls: client certificate: %w", err)
	}
	return id, nil
}

// revocations is the revocation list of a server, reread when its file
// changes.
type revocations struct {
	path string
	ca   *x509.Certificate

	mu      sync.Mutex // guards the fields that follow
	stamp   fileStamp  // of the file the list was read from
	serials map[string]bool
	err     error // why the file last read is unusable; nil if it is usable
}

// fileStamp tells a file apart from its next version: Revoke replaces the
// file by rename, so a new version has a new inode as well as a new mtime.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func stampOf(fi os.FileInfo) fileStamp {
	return fileStamp{ino: inode(fi), size: fi.Size(), mtime: fi.ModTime()}
}

// refresh rereads the list if its file changed since it was last read.
func (r *revocations) refresh() error {
	fi, err := os.Stat(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.stamp, r.serials, r.err = fileStamp{}, nil, err
		return r.err
	}
	if st := stampOf(fi); st == r.stamp && (r.serials != nil || r.err != nil) {
		return r.err
	}
	f, err := os.Open(r.path)
	if err != nil {
		r.stamp, r.serials, r.err = fileStamp{}, nil, err
		return err
	}
	defer f.Close()
	// The stamp of what is read, not of what was stat'ed: a rename in
	// between is seen on the next handshake.
	if fi, err = f.Stat(); err != nil {
		r.stamp, r.serials, r.err = fileStamp{}, nil, err
		return err
	}
	r.stamp = stampOf(fi)
	crl, err := parseCRL(f, r.path, r.ca)
	if err != nil {
		r.serials, r.err = nil, err
		return err
	}
	r.serials = make(map[string]bool, len(crl.RevokedCertificateEntries))
	for _, e := range crl.RevokedCertificateEntries {
		r.serials[string(e.SerialNumber.Bytes())] = true
	}
	r.err = nil
	return nil
}

// verify is the server's VerifyConnection: Go has verified a certificate
// that was given; it refuses a missing one and a revoked one.
func (r *revocations) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return &Refusal{Reason: ReasonNoCertificate}
	}
	leaf := cs.PeerCertificates[0]
	if len(cs.VerifiedChains) == 0 {
		// Not reached with ServerConfig's settings; refuse rather than trust.
		return &Refusal{Reason: ReasonBadCert, Name: leaf.Subject.CommonName, Serial: leaf.SerialNumber}
	}
	if err := r.refresh(); err != nil {
		return &Refusal{Reason: ReasonCRLUnusable, Name: leaf.Subject.CommonName, Serial: leaf.SerialNumber, Err: err}
	}
	r.mu.Lock()
	revoked := r.serials[string(leaf.SerialNumber.Bytes())]
	r.mu.Unlock()
	if revoked {
		return &Refusal{Reason: ReasonRevoked, Name: leaf.Subject.CommonName, Serial: leaf.SerialNumber}
	}
	if _, err := identityOf(leaf); err != nil {
		return &Refusal{Reason: ReasonBadCert, Name: leaf.Subject.CommonName, Serial: leaf.SerialNumber, Err: err}
	}
	return nil
}

// readCRL reads and checks the revocation list at path.
func readCRL(path string, ca *x509.Certificate) (*x509.RevocationList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseCRL(f, path, ca)
}

func parseCRL(f *os.File, path string, ca *x509.Certificate) (*x509.RevocationList, error) {
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "X509 CRL" {
		return nil, fmt.Errorf("%s: no PEM X509 CRL", path)
	}
	crl, err := x509.ParseRevocationList(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := crl.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("%s is not signed by the CA: %w", path, err)
	}
	return crl, nil
}

// readCredentials reads what ServerConfig and ClientConfig both need from
// dir, once checkReadDir accepts it: the CA (ca.pem, as a pool and as the
// certificate) and the key pair in certFile and keyFile.
func readCredentials(dir, certFile, keyFile string) (*x509.CertPool, *x509.Certificate, tls.Certificate, error) {
	if err := checkReadDir(dir); err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	pool, ca, err := readPool(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	cert, err := loadPair(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
	if err != nil {
		return nil, nil, tls.Certificate{}, err
	}
	return pool, ca, cert, nil
}

func readPool(path string) (*x509.CertPool, *x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	ca, err := parseCert(b, path)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, ca, nil
}

func loadPair(certPath, keyPath string) (tls.Certificate, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	kb, err := readKey(keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	c, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s, %s: %w", certPath, keyPath, err)
	}
	return c, nil
}
