package tlsdir

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkHandshake measures a full TLS 1.3 mutual handshake over
// loopback TCP with ServerConfig (the revocation check: a stat of crl.pem
// and a map lookup per handshake) against the same configuration without
// it, interleaved so both see the same machine. It reports the ratio.
func BenchmarkHandshake(b *testing.B) {
	ca := newCA(b, InitOptions{})
	// A list of some size, so the lookup is not trivially empty.
	for i := 0; i < 50; i++ {
		name := "gone" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if _, err := Issue(ca, name, IssueOptions{}, filepath.Join(b.TempDir(), name)); err != nil {
			b.Fatal(err)
		}
		if _, err := Revoke(ca, name); err != nil {
			b.Fatal(err)
		}
	}
	with := serverConfig(b, ca)
	without := with.Clone()
	without.ClientAuth, without.VerifyConnection = tls.RequireAndVerifyClientCert, nil
	cli := clientConfig(b, ca)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cfgs := make(chan *tls.Config)
	errs := make(chan error)
	go func() {
		for cfg := range cfgs {
			c, err := ln.Accept()
			if err == nil {
				err = tls.Server(c, cfg).Handshake()
				c.Close()
			}
			errs <- err
		}
	}()
	defer close(cfgs)
	once := func(cfg *tls.Config) time.Duration {
		start := time.Now()
		cfgs <- cfg
		c, err := tls.Dial("tcp", ln.Addr().String(), cli)
		if err == nil {
			c.Close()
		}
		if serr := <-errs; err != nil || serr != nil {
			b.Fatalf("client %v, server %v", err, serr)
		}
		return time.Since(start)
	}
	var tWith, tWithout time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tWith += once(with)
		tWithout += once(without)
	}
	b.ReportMetric(float64(tWith.Nanoseconds())/float64(b.N), "ns/check-handshake")
	b.ReportMetric(float64(tWithout.Nanoseconds())/float64(b.N), "ns/plain-handshake")
	b.ReportMetric(float64(tWith)/float64(tWithout), "ratio")
}

// BenchmarkRevocationCheck measures the check alone on an unchanged
// crl.pem: what every handshake pays.
func BenchmarkRevocationCheck(b *testing.B) {
	ca := newCA(b, InitOptions{})
	_, caCert, err := readPool(filepath.Join(ca, CAFile))
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := parseCertFile(filepath.Join(ca, ClientFile))
	if err != nil {
		b.Fatal(err)
	}
	rl := &revocations{path: filepath.Join(ca, CRLFile), ca: caCert}
	if err := rl.refresh(); err != nil {
		b.Fatal(err)
	}
	cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, caCert}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := rl.verify(cs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRevocationReload measures rereading a changed crl.pem of 1000
// entries: what the first handshake after a revoke pays.
func BenchmarkRevocationReload(b *testing.B) {
	ca := newCA(b, InitOptions{})
	caCert, caKey, _, err := loadCA(ca)
	if err != nil {
		b.Fatal(err)
	}
	var entries []x509.RevocationListEntry
	for i := 0; i < 1000; i++ {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: newSerial(), RevocationTime: time.Now()})
	}
	crl, err := signCRL(caCert, caKey, entries, big.NewInt(2))
	if err != nil {
		b.Fatal(err)
	}
	if err := writeFile(filepath.Join(ca, CRLFile), crl, 0o644, true); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rl := &revocations{path: filepath.Join(ca, CRLFile), ca: caCert}
		if err := rl.refresh(); err != nil || len(rl.serials) != 1000 {
			b.Fatal(err)
		}
	}
}
