package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/corral-dev/corral/internal/tlsdir"
	"github.com/corral-dev/corral/internal/wire"
)

// TLS has Dial reach a remote daemon (a target HOST:PORT) with the
// credentials in dir: ca.pem (the authority the daemon's certificate must
// chain to) and client.pem, client-key.pem (this client's identity). The
// directory corral tls init made and any client directory from corral tls
// issue work alike.
//
// A remote daemon is not started on demand, and this process's working
// directory and environment are not sent to it: a session created remotely
// starts in the daemon's home (or ExecOptions.Cwd, which must then be an
// absolute path on the daemon's machine) with the daemon's environment
// plus ExecOptions.Env.
func TLS(dir string) Option {
	return func(o *options) { o.tlsDir = dir }
}

// Client-side keepalive of a remote connection: a daemon that vanished (a
// cable cut) is noticed within 3 s of silence and 3 probes 2 s apart
// (9 s) while the client waits for output; the daemon
// sets the same on its end.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 3 * time.Second, Interval: 2 * time.Second, Count: 3}

// dialBound bounds the TCP connect to a remote daemon (an address that
// drops packets would otherwise take the system's minutes).
const dialBound = 10 * time.Second

// isHostPort reports whether target reads as HOST:PORT rather than a
// path.
func isHostPort(target string) bool {
	if strings.ContainsRune(target, os.PathSeparator) || strings.ContainsRune(target, '/') {
		return false
	}
	host, port, err := net.SplitHostPort(target)
	return err == nil && host != "" && port != ""
}

// dialRemote prepares c to reach the daemon at addr with o's TLS
// credentials.
func (c *Client) dialRemote(addr string, o *options) error {
	if o.tlsDir == "" {
		return fmt.Errorf("dial %s: a remote daemon is reached over TLS only: give the credentials directory (--tls DIR, $CORRAL_TLS_DIR; client.TLS)", addr)
	}
	host, _, _ := net.SplitHostPort(addr)
	conf, err := tlsdir.ClientConfig(o.tlsDir, strings.Trim(host, "[]"))
	if err != nil {
		return fmt.Errorf("dial %s: TLS credentials in %s: %w", addr, o.tlsDir, err)
	}
	c.addr, c.tlsConf = addr, conf
	return nil
}

// dialTLS opens a TCP connection to the remote daemon and does the TLS
// handshake within deadline.
func (c *Client) dialTLS(ctx context.Context, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Timeout: dialBound, KeepAliveConfig: keepAlive}
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		if notListening(err) || errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err) {
			return nil, fmt.Errorf("%w: no daemon answers at %s (%v); a remote daemon is not started on demand: run corral daemon --listen %s --tls DIR there",
				ErrNoDaemon, c.addr, err, c.addr)
		}
		return nil, fmt.Errorf("dial %s: %w", c.addr, err)
	}
	tc := tls.Client(nc, c.tlsConf)
	hctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		nc.Close()
		return nil, c.tlsErr(err)
	}
	return tc, nil
}

// tlsErr says what a TLS failure with the remote daemon means. With TLS
// 1.3 the daemon's verdict on this client's certificate comes after the
// client's side of the handshake, as an alert on the first read: connect
// passes the error of that read here too.
func (c *Client) tlsErr(err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return err // the daemon said it in its protocol
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return fmt.Errorf("%w: the daemon at %s refused this client's certificate (%v): it must be issued by the daemon's CA, unexpired and not revoked; the daemon's log says which", ErrPermission, c.addr, oe.Err)
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return fmt.Errorf("the daemon at %s is not the one these credentials are for: its certificate does not verify against ca.pem: %w", c.addr, cv.Err)
	}
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return fmt.Errorf("the service at %s does not speak TLS (%v): is it a corral daemon --listen?", c.addr, err)
	}
	return fmt.Errorf("TLS with the daemon at %s: %w", c.addr, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
