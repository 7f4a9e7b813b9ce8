package tlsdir

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// opensslConf is the configuration the openssl-made CA is issued with.
const opensslConf = `
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
[client]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
[ca]
default_ca = osl
[osl]
database = index.txt
crlnumber = crlnumber
default_md = default
default_crl_days = 30
`

// openssl runs the openssl CLI in dir, failing the test on an error.
func openssl(t *testing.T, mark, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("openssl", args...)
	c.Dir = dir
	c.Env = testproc.Env(mark)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func needOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl on PATH")
	}
}

// TestOpenSSLMadeCertificates runs ServerConfig and ClientConfig on a CA,
// server and client certificates and revocation lists made by the openssl
// CLI, for Ed25519 and ECDSA P-256 keys.
func TestOpenSSLMadeCertificates(t *testing.T) {
	needOpenSSL(t)
	for _, alg := range []struct{ name, genpkey string }{
		{"ed25519", "-algorithm ed25519"},
		{"ecdsa", "-algorithm EC -pkeyopt ec_paramgen_curve:P-256"},
	} {
		t.Run(alg.name, func(t *testing.T) {
			mark := testproc.Guard(t, 60*time.Second)
			dir := filepath.Join(t.TempDir(), "osl")
			os.Mkdir(dir, 0o700)
			os.WriteFile(filepath.Join(dir, "osl.cnf"), []byte(opensslConf), 0o600)
			os.WriteFile(filepath.Join(dir, "index.txt"), nil, 0o600)
			os.WriteFile(filepath.Join(dir, "crlnumber"), []byte("01\n"), 0o600)
			run := func(args ...string) string { return openssl(t, mark, dir, args...) }
			genkey := func(out string) {
				run(append(append([]string{"genpkey"}, strings.Fields(alg.genpkey)...), "-out", out)...)
				os.Chmod(filepath.Join(dir, out), 0o600)
			}
			genkey(CAKeyFile)
			run("req", "-x509", "-new", "-config", "osl.cnf", "-extensions", "v3_ca", "-key", CAKeyFile,
				"-subj", "/CN=openssl CA", "-days", "30", "-out", CAFile)
			sign := func(key, subj, ext, serial, out string) {
				genkey(key)
				run("req", "-new", "-config", "osl.cnf", "-key", key, "-subj", subj, "-out", out+".csr")
				run("x509", "-req", "-in", out+".csr", "-CA", CAFile, "-CAkey", CAKeyFile, "-set_serial", serial,
					"-days", "30", "-extfile", "osl.cnf", "-extensions", ext, "-out", out)
			}
			sign(ServerKeyFile, "/CN=localhost", "server", "0x1001", ServerFile)
			sign("ro-key.pem", "/CN=osl-ro/OU="+ReadOnlyOU, "client", "0x2001", "ro.pem")
			sign("rw-key.pem", "/CN=osl-rw", "client", "0x2002", "rw.pem")
			gencrl := func() {
				run("ca", "-config", "osl.cnf", "-gencrl", "-keyfile", CAKeyFile, "-cert", CAFile, "-out", CRLFile)
			}
			gencrl()
			clientDir := func(name string) string {
				d := filepath.Join(t.TempDir(), name)
				os.Mkdir(d, 0o700)
				for from, to := range map[string]string{CAFile: CAFile, name + ".pem": ClientFile, name + "-key.pem": ClientKeyFile} {
					b, err := os.ReadFile(filepath.Join(dir, from))
					if err != nil {
						t.Fatal(err)
					}
					os.WriteFile(filepath.Join(d, to), b, 0o600)
				}
				return d
			}
			ro, rw := clientConfig(t, clientDir("ro")), clientConfig(t, clientDir("rw"))

			s := serve(t, serverConfig(t, dir))
			expectAccepted(t, s, ro, Identity{Name: "osl-ro", ReadOnly: true})
			expectAccepted(t, s, rw, Identity{Name: "osl-rw"})

			// Revoked by openssl, refused by the running server.
			run("ca", "-config", "osl.cnf", "-revoke", "rw.pem", "-keyfile", CAKeyFile, "-cert", CAFile)
			gencrl()
			expectRefused(t, s, rw, ReasonRevoked)
			expectAccepted(t, s, ro, Identity{Name: "osl-ro", ReadOnly: true})
		})
	}
}

// TestOpenSSLVerifiesOurCertificates has openssl check what Init, Issue and
// Revoke made: the chain, the key usages and the revocation list.
func TestOpenSSLVerifiesOurCertificates(t *testing.T) {
	needOpenSSL(t)
	mark := testproc.Guard(t, 60*time.Second)
	ca := newCA(t, InitOptions{})
	out := issueTo(t, ca, "ci", IssueOptions{ReadOnly: true})
	run := func(args ...string) string { return openssl(t, mark, ca, args...) }
	run("verify", "-CAfile", CAFile, "-purpose", "sslserver", ServerFile)
	run("verify", "-CAfile", CAFile, "-purpose", "sslclient", ClientFile)
	run("verify", "-CAfile", CAFile, "-purpose", "sslclient", "-crl_check", "-CRLfile", CRLFile, filepath.Join(out, ClientFile))
	if subj := run("x509", "-noout", "-subject", "-in", filepath.Join(out, ClientFile)); !strings.Contains(subj, "OU = read-only") || !strings.Contains(subj, "CN = ci") {
		t.Fatalf("subject %q", subj)
	}
	if _, err := Revoke(ca, "ci"); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("openssl", "verify", "-CAfile", CAFile, "-crl_check", "-CRLfile", CRLFile, filepath.Join(out, ClientFile))
	c.Dir, c.Env = ca, testproc.Env(mark)
	b, err := c.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "revoked") {
		t.Fatalf("openssl verify of a revoked certificate: %v\n%s", err, b)
	}
	run("crl", "-noout", "-CAfile", CAFile, "-in", CRLFile) // the list's signature verifies
}
