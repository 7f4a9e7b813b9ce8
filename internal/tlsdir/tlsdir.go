// Package tlsdir makes and reads the credentials of remote corral: a
// directory holding a certificate authority, the daemon's server
// certificate, client certificates and the list of revoked ones.
//
// A CA directory, made by Init, holds:
//
//	ca.pem, ca-key.pem          the authority (Ed25519)
//	server.pem, server-key.pem  the daemon's certificate, for the hosts given
//	client.pem, client-key.pem  one client identity (Init's Client)
//	crl.pem                     the revocation list, signed by the CA
//	index.json                  every certificate issued: name, serial, read-only, expiry, revocation
//
// A client directory, made by Issue, holds ca.pem, client.pem and
// client-key.pem; ClientConfig reads those three from either kind, so the
// directory Init made and any client directory work alike. Directories are
// 0700, key files 0600, and every file is written atomically (temporary
// file, fsync, rename).
//
// A client's identity is its certificate's CommonName. A read-only client
// carries OrganizationalUnit "read-only" in its subject: the field is
// covered by the CA's signature like the name, shows in any tool
// (`openssl x509 -noout -subject`), and an openssl-made certificate gets it
// with -subj "/CN=NAME/OU=read-only". A custom extension would have needed
// an OID of our own and, to be safe against verifiers that ignore it, to be
// critical, which Go's own chain verification rejects.
package tlsdir

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// The files of a credentials directory.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
	ClientFile    = "client.pem"
	ClientKeyFile = "client-key.pem"
	CRLFile       = "crl.pem"
	IndexFile     = "index.json"
	lockFile      = ".lock"
)

// ReadOnlyOU is the OrganizationalUnit that marks a client certificate
// read-only.
const ReadOnlyOU = "read-only"

// Default validities.
const (
	DefaultCAValidity     = 10 * 365 * 24 * time.Hour // the CA and the server certificate
	DefaultClientValidity = 365 * 24 * time.Hour
)

// DefaultClient is the name of the client certificate Init makes when
// InitOptions.Client is empty.
const DefaultClient = "admin"

// backdate is how far before now a certificate's validity starts, so that
// a peer whose clock runs a little behind accepts it.
const backdate = 5 * time.Minute

// Identity is who a verified client is: its certificate's CommonName and
// whether the certificate is marked read-only.
type Identity struct {
	Name     string
	ReadOnly bool
}

// Issued is one certificate of the index.
type Issued struct {
	Name      string     `json:"name"`
	Serial    string     `json:"serial"` // hexadecimal
	ReadOnly  bool       `json:"read_only"`
	NotAfter  time.Time  `json:"not_after"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// index is index.json.
type index struct {
	Version int      `json:"version"`
	Issued  []Issued `json:"issued"`
}

const indexVersion = 1

// InitOptions are the choices of Init.
type InitOptions struct {
	// Hosts are the DNS names and IP addresses the server certificate is
	// valid for. Empty means localhost, 127.0.0.1 and ::1.
	Hosts []string
	// Client names the client certificate Init makes (DefaultClient if
	// empty); it is valid for DefaultClientValidity.
	Client string
	// Validity of the CA and of the server certificate
	// (DefaultCAValidity if zero).
	Validity time.Duration
	// Force replaces an existing CA, invalidating every certificate it
	// issued. Without it Init refuses a directory that holds one.
	Force bool
}

// nameRE and hostRE are compiled on first use, not at package init: init
// runs in every corral process (the CLI links this package for its tls
// commands), and compiling them there cost 0.2 ms of each `corral run`.
var nameRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
})

// CheckName reports whether name can be a client's identity: 1 to 64
// characters of [A-Za-z0-9._-], starting with a letter or digit. Names are
// logged and authorized on, so nothing that could be mistaken for
// something else (spaces, slashes, control characters) is allowed.
func CheckName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("client name %q: want 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit: %w", name, ErrInvalid)
	}
	return nil
}

// hostRE is one DNS name: labels of letters, digits and hyphens, with an
// optional leading wildcard label.
var hostRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
})

// splitHosts sorts hosts into DNS names and IP addresses.
func splitHosts(hosts []string) (dns []string, ips []net.IP, err error) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if len(h) > 253 || !hostRE().MatchString(h) || strings.Trim(h, "0123456789.") == "" {
			return nil, nil, fmt.Errorf("host %q is neither an IP address nor a DNS name: %w", h, ErrInvalid)
		}
		dns = append(dns, h)
	}
	return dns, ips, nil
}

// Init makes a new CA in dir (created with mode 0700 if missing; an
// existing one must be ours and closed to others), a server certificate for
// opts.Hosts, one client certificate, an empty revocation list and the
// index.
func Init(dir string, opts InitOptions) error {
	if opts.Hosts == nil {
		opts.Hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	if opts.Client == "" {
		opts.Client = DefaultClient
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultCAValidity
	}
	if opts.Validity < 0 {
		return fmt.Errorf("validity %v: %w", opts.Validity, ErrInvalid)
	}
	dns, ips, err := splitHosts(opts.Hosts)
	if err != nil {
		return err
	}
	if len(dns)+len(ips) == 0 {
		return fmt.Errorf("no host for the server certificate: %w", ErrInvalid)
	}
	if err := CheckName(opts.Client); err != nil {
		return err
	}
	if err := makeDir(dir); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	if !opts.Force {
		for _, f := range []string{CAFile, CAKeyFile} {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				return fmt.Errorf("%s already holds a CA (%s); pass --force to replace it and invalidate every certificate it issued: %w", dir, f, ErrExists)
			}
		}
	}

	now := time.Now()
	caPub, caKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: "corral CA " + randHex(4), Organization: []string{"corral"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(opts.Validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caPub, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvPub, srvKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      pkix.Name{CommonName: opts.Hosts[0], Organization: []string{"corral"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, srvPub, caKey)
	if err != nil {
		return err
	}
	cli, err := newClient(ca, caKey, Identity{Name: opts.Client}, now.Add(-backdate), minTime(now.Add(DefaultClientValidity), ca.NotAfter))
	if err != nil {
		return err
	}
	crl, err := signCRL(ca, caKey, nil, big.NewInt(1))
	if err != nil {
		return err
	}
	idx, err := json.MarshalIndent(index{Version: indexVersion, Issued: []Issued{cli.issued}}, "", "  ")
	if err != nil {
		return err
	}
	caKeyPEM, err := keyPEM(caKey)
	if err != nil {
		return err
	}
	srvKeyPEM, err := keyPEM(srvKey)
	if err != nil {
		return err
	}
	// ca.pem last: a directory without it is not a CA yet, and Init may
	// be run again on it.
	for _, f := range []struct {
		name string
		data []byte
		perm fs.FileMode
	}{
		{IndexFile, idx, 0o600},
		{CRLFile, crl, 0o644},
		{ServerKeyFile, srvKeyPEM, 0o600},
		{ServerFile, certPEM(srvDER), 0o644},
		{ClientKeyFile, cli.keyPEM, 0o600},
		{ClientFile, cli.certPEM, 0o644},
		{CAKeyFile, caKeyPEM, 0o600},
		{CAFile, certPEM(caDER), 0o644},
	} {
		if err := writeFile(filepath.Join(dir, f.name), f.data, f.perm, true); err != nil {
			return err
		}
	}
	return nil
}

// IssueOptions are the choices of Issue.
type IssueOptions struct {
	ReadOnly bool
	// Validity of the certificate (DefaultClientValidity if zero); it
	// ends no later than the CA's.
	Validity time.Duration
}

// Issue makes a client certificate for name, signed by the CA in dir,
// records it in dir's index and writes ca.pem, client.pem and
// client-key.pem to out (created 0700 if missing). Issue refuses an out
// that already holds client credentials. A name may be issued more than
// once (a renewal); Revoke revokes every certificate of the name.
func Issue(dir, name string, opts IssueOptions, out string) (Issued, error) {
	if err := CheckName(name); err != nil {
		return Issued{}, err
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultClientValidity
	}
	if opts.Validity < 0 {
		return Issued{}, fmt.Errorf("validity %v: %w", opts.Validity, ErrInvalid)
	}
	now := time.Now()
	return issue(dir, Identity{Name: name, ReadOnly: opts.ReadOnly}, now.Add(-backdate), now.Add(opts.Validity), out)
}

// issue is Issue with the validity window given (tests issue expired
// certificates with it).
func issue(dir string, id Identity, notBefore, notAfter time.Time, out string) (Issued, error) {
	if err := checkDir(dir); err != nil {
		return Issued{}, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return Issued{}, err
	}
	defer unlock()
	ca, caKey, caPEM, err := loadCA(dir)
	if err != nil {
		return Issued{}, err
	}
	idx, err := readIndex(dir)
	if err != nil {
		return Issued{}, err
	}
	for _, f := range []string{ClientFile, ClientKeyFile} {
		if _, err := os.Lstat(filepath.Join(out, f)); err == nil {
			return Issued{}, fmt.Errorf("%s already holds client credentials (%s): %w", out, f, ErrExists)
		}
	}
	cli, err := newClient(ca, caKey, id, notBefore, minTime(notAfter, ca.NotAfter))
	if err != nil {
		return Issued{}, err
	}
	if err := makeDir(out); err != nil {
		return Issued{}, err
	}
	// Recorded before it is handed out: a certificate that exists is one
	// Revoke can find.
	idx.Issued = append(idx.Issued, cli.issued)
	if err := writeIndex(dir, idx); err != nil {
		return Issued{}, err
	}
	if err := writeFile(filepath.Join(out, ClientKeyFile), cli.keyPEM, 0o600, false); err != nil {
		return Issued{}, err
	}
	if err := writeFile(filepath.Join(out, ClientFile), cli.certPEM, 0o644, false); err != nil {
		return Issued{}, err
	}
	if err := writeFile(filepath.Join(out, CAFile), caPEM, 0o644, true); err != nil {
		return Issued{}, err
	}
	return cli.issued, nil
}

// Revoke adds every unrevoked certificate issued under name to dir's
// revocation list (crl.pem, signed by the CA, its number one more than the
// last) and marks them revoked in the index. A server made by ServerConfig
// refuses them from its next handshake on, without a restart. It returns
// the revoked entries.
func Revoke(dir, name string) ([]Issued, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ca, caKey, _, err := loadCA(dir)
	if err != nil {
		return nil, err
	}
	idx, err := readIndex(dir)
	if err != nil {
		return nil, err
	}
	old, err := readCRL(filepath.Join(dir, CRLFile), ca)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	var revoked []Issued
	known := false
	for i := range idx.Issued {
		is := &idx.Issued[i]
		if is.Name != name {
			continue
		}
		known = true
		if is.RevokedAt == nil {
			is.RevokedAt = &now
			revoked = append(revoked, *is)
		}
	}
	if !known {
		return nil, fmt.Errorf("%q in %s: %w", name, dir, ErrUnknownName)
	}
	if len(revoked) == 0 {
		return nil, fmt.Errorf("%q: every certificate of the name is %w", name, ErrAlreadyRevoked)
	}
	entries := old.RevokedCertificateEntries
	for _, r := range revoked {
		serial, ok := new(big.Int).SetString(r.Serial, 16)
		if !ok {
			return nil, fmt.Errorf("%s: bad serial %q for %q", IndexFile, r.Serial, r.Name)
		}
		entries = append(entries, x509.RevocationListEntry{SerialNumber: serial, RevocationTime: now})
	}
	number := big.NewInt(1)
	if old.Number != nil {
		number.Add(old.Number, big.NewInt(1))
	}
	crl, err := signCRL(ca, caKey, entries, number)
	if err != nil {
		return nil, err
	}
	// The list first: a crash between the two leaves a certificate
	// revoked but shown as not, which a second Revoke fixes; the other
	// order would leave it shown revoked and honoured.
	if err := writeFile(filepath.Join(dir, CRLFile), crl, 0o644, true); err != nil {
		return nil, err
	}
	if err := writeIndex(dir, idx); err != nil {
		return nil, err
	}
	return revoked, nil
}

// List returns the index of dir: every certificate issued, in order.
func List(dir string) ([]Issued, error) {
	idx, err := readIndex(dir)
	if err != nil {
		return nil, err
	}
	return idx.Issued, nil
}

type client struct {
	issued          Issued
	certPEM, keyPEM []byte
}

func newClient(ca *x509.Certificate, caKey crypto.Signer, id Identity, notBefore, notAfter time.Time) (client, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return client{}, err
	}
	subj := pkix.Name{CommonName: id.Name, Organization: []string{"corral"}}
	if id.ReadOnly {
		subj.OrganizationalUnit = []string{ReadOnlyOU}
	}
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      subj,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return client{}, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return client{}, err
	}
	return client{
		issued: Issued{Name: id.Name, Serial: tmpl.SerialNumber.Text(16), ReadOnly: id.ReadOnly,
			NotAfter: notAfter.UTC().Truncate(time.Second)},
		certPEM: certPEM(der),
		keyPEM:  kp,
	}, nil
}

func signCRL(ca *x509.Certificate, caKey crypto.Signer, entries []x509.RevocationListEntry, number *big.Int) ([]byte, error) {
	now := time.Now()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                now.Add(-backdate),
		NextUpdate:                ca.NotAfter, // only our servers read it, and they reload it on change
		RevokedCertificateEntries: entries,
	}, ca, caKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), nil
}

// loadCA reads the CA certificate and key of dir.
func loadCA(dir string) (*x509.Certificate, crypto.Signer, []byte, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil, fmt.Errorf("%s holds no CA (run 'corral tls init %s' first): %w", dir, dir, err)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := parseCert(caPEM, CAFile)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEMb, err := readKey(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, nil, nil, err
	}
	blk, _ := pem.Decode(keyPEMb)
	if blk == nil {
		return nil, nil, nil, fmt.Errorf("%s: no PEM block", CAKeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", CAKeyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !publicKeysEqual(signer.Public(), ca.PublicKey) {
		return nil, nil, nil, fmt.Errorf("%s is not the key of %s", CAKeyFile, CAFile)
	}
	return ca, signer, caPEM, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

func parseCert(b []byte, what string) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", what)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return c, nil
}

func readIndex(dir string) (index, error) {
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return index{}, err
	}
	var idx index
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&idx); err != nil {
		return index{}, fmt.Errorf("%s: %w", filepath.Join(dir, IndexFile), err)
	}
	if idx.Version != indexVersion {
		return index{}, fmt.Errorf("%s: version %d, want %d", filepath.Join(dir, IndexFile), idx.Version, indexVersion)
	}
	return idx, nil
}

func writeIndex(dir string, idx index) error {
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, IndexFile), append(b, '\n'), 0o600, true)
}

func lockPath(dir string) string { return filepath.Join(dir, lockFile) }

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(k crypto.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// newSerial returns a random positive 127-bit serial.
func newSerial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b)
	b[0] &= 0x7f
	b[0] |= 0x40 // never short, never zero
	return new(big.Int).SetBytes(b)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func parseCertFile(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCert(b, path)
}
