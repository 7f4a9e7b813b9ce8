package tlsdir

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
)

// Sentinel classes of the errors Init, Issue and Revoke return; match them
// with errors.Is.
var (
	// ErrInvalid means a bad argument: a host that is neither an IP nor a
	// DNS name, a client name with characters outside [A-Za-z0-9._-], a
	// validity that is not positive.
	ErrInvalid = errors.New("invalid argument")
	// ErrExists means the directory already holds what would be written
	// (a CA, a client's credentials) and overwriting was not asked for.
	ErrExists = errors.New("already exists")
	// ErrUnknownName means no certificate was issued under that name.
	ErrUnknownName = errors.New("no certificate issued under that name")
	// ErrAlreadyRevoked means every certificate of the name is revoked.
	ErrAlreadyRevoked = errors.New("already revoked")
	// ErrUnsafe means a directory or key file others can read or enter,
	// or a symlink where a directory of ours should be. It is refused,
	// never fixed with chmod.
	ErrUnsafe = errors.New("unsafe permissions")
)

// Reason says why the server refused a connection; it is a short fixed
// string fit for a log field or a metric label.
type Reason string

// The reasons a handshake served by ServerConfig fails.
const (
	ReasonNone          Reason = ""
	ReasonPlaintext     Reason = "not TLS"                  // the peer spoke something other than TLS
	ReasonNoCertificate Reason = "no certificate"           // the client presented none
	ReasonUnknownCA     Reason = "unknown CA"               // signed by another authority
	ReasonExpired       Reason = "expired"                  // outside its validity (expired or not yet valid)
	ReasonRevoked       Reason = "revoked"                  // its serial is in crl.pem
	ReasonBadCert       Reason = "bad certificate"          // wrong key usage, malformed, ...
	ReasonCRLUnusable   Reason = "revocation list unusable" // crl.pem missing, corrupt or not the CA's: fail closed
	ReasonHandshake     Reason = "handshake failed"         // anything else (TLS 1.2, no common cipher, a reset)
)

// Refusal is the error a ServerConfig handshake fails with when the
// server's own checks refuse the client's certificate. Go's chain
// verification errors (unknown CA, expired) come as
// *tls.CertificateVerificationError instead; RefusalReason classifies both.
type Refusal struct {
	Reason Reason
	Name   string   // the certificate's CommonName, if there was one
	Serial *big.Int // its serial, if there was one
	Err    error    // the underlying cause, if any
}

func (r *Refusal) Error() string {
	s := "tls: client refused: " + string(r.Reason)
	if r.Name != "" {
		s += fmt.Sprintf(" (%q, serial %x)", r.Name, r.Serial)
	}
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

func (r *Refusal) Unwrap() error { return r.Err }

// RefusalReason classifies the error of a server-side Handshake on a
// connection served with ServerConfig; ReasonNone for a nil error.
func RefusalReason(err error) Reason {
	if err == nil {
		return ReasonNone
	}
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return ReasonPlaintext
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return verifyReason(cv.Err)
	}
	return ReasonHandshake
}

// verifyReason classifies an error of x509.Certificate.Verify.
func verifyReason(err error) Reason {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return ReasonUnknownCA
	}
	var ci x509.CertificateInvalidError
	if errors.As(err, &ci) && ci.Reason == x509.Expired {
		return ReasonExpired
	}
	return ReasonBadCert
}

// RefusedName returns the CommonName and serial of the certificate a
// refused client presented, for the log line of a refusal; ok is false if
// it presented none or the handshake failed before it did.
func RefusedName(err error) (name string, serial *big.Int, ok bool) {
	var r *Refusal
	if errors.As(err, &r) && r.Serial != nil {
		return r.Name, r.Serial, true
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) && len(cv.UnverifiedCertificates) > 0 {
		leaf := cv.UnverifiedCertificates[0]
		return leaf.Subject.CommonName, leaf.SerialNumber, true
	}
	return "", nil, false
}
