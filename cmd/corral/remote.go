package main

import (
	"context"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/mcpserver"
)

// The environment variables of a remote target, the defaults of --host
// and --tls.
const (
	hostEnv   = "CORRAL_HOST"
	tlsDirEnv = "CORRAL_TLS_DIR"
)

// target is where the daemon verbs go: the local daemon of the state
// directory, or a remote one (--host HOST:PORT with --tls DIR). The verbs
// share it: each registers the flags on itself (addTargetFlags).
var target struct {
	host, tlsDir string
}

// addTargetFlags gives c the flags that choose a remote daemon.
func addTargetFlags(c *cobra.Command) {
	c.Flags().StringVar(&target.host, "host", "", "reach the daemon at HOST:PORT over TLS (default $"+hostEnv+"; needs --tls)")
	c.Flags().StringVar(&target.tlsDir, "tls", "", "TLS credentials: ca.pem, client.pem, client-key.pem (a corral tls init or tls issue directory; default $"+tlsDirEnv+")")
}

// remoteHost returns the remote target (flag, else environment) and its
// credentials directory; "" for the local daemon.
func remoteHost() (host, dir string, err error) {
	host, dir = target.host, target.tlsDir
	if host == "" {
		host = os.Getenv(hostEnv)
	}
	if dir == "" {
		dir = os.Getenv(tlsDirEnv)
	}
	if host == "" {
		if target.tlsDir != "" {
			return "", "", usageErr("--tls %s is for a remote daemon: give --host HOST:PORT too", target.tlsDir)
		}
		return "", "", nil
	}
	if dir == "" {
		return "", "", usageErr("--host %s: a remote daemon is reached over TLS only: give --tls DIR (or $%s), a directory from corral tls init or tls issue", host, tlsDirEnv)
	}
	return host, dir, nil
}

// dialRemote dials the remote daemon at host with the credentials of dir.
// A remote daemon is never started on demand.
func dialRemote(host, dir string) (*client.Client, error) {
	c, err := client.Dial(context.Background(), host, client.TLS(dir))
	if err != nil {
		return nil, &exitError{code: exitInternal, msg: err.Error()}
	}
	return c, nil
}

// envFlags checks --env K=V values.
func envFlags(kvs []string) error {
	for _, kv := range kvs {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return usageErr("--env %q: want NAME=VALUE", kv)
		}
	}
	return nil
}

// mcpRemote points cfg at the remote daemon of --host, if one is given:
// dialled with --tls (never started), and nothing of this machine sent,
// neither its working directory nor its environment.
func mcpRemote(cfg *mcpserver.Config) error {
	host, dir, err := remoteHost()
	if err != nil || host == "" {
		return err
	}
	cfg.Remote, cfg.Dir, cfg.Env = true, "", []string{}
	cfg.Dial = func(context.Context) (mcpserver.Daemon, error) {
		c, err := dialRemote(host, dir)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil
}
