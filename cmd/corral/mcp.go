package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"golang.org/x/net/netutil"

	"github.com/corral-dev/corral/internal/mcpserver"
	"github.com/corral-dev/corral/internal/store"
)

func mcpCommand(stderr io.Writer) *cobra.Command {
	var session, httpAddr string
	var noAgentEnv bool
	c := &cobra.Command{
		Use:   "mcp [--session NAME] [--http ADDR] [--no-agent-env]",
		Short: "Serve corral's tools to coding agents over the Model Context Protocol",
		Long: `Serve MCP on stdin and stdout (what agent clients launch), or with --http
ADDR over streamable HTTP at http://ADDR/mcp (a bare :PORT binds 127.0.0.1).
Every HTTP request must carry "Authorization: Bearer TOKEN", the token in
mcp-token in the state directory (made on first use, mode 0600).

Tools: exec, exec_wait, exec_cancel, sessions, kill_session. Commands run
in the daemon's sessions (started on demand), visible to corral ls. The
default session is --session, or one named after this directory. Commands
get PAGER=cat, GIT_PAGER=cat, GIT_TERMINAL_PROMPT=0 unless --no-agent-env.

--host HOST:PORT --tls DIR drives the daemon of another machine (never
started on demand): nothing of this machine is sent, neither this
directory nor this environment; a new session starts in the daemon's home
with its environment, the agent variables and a call's env.

A call cancelled by the client, or a client gone, stops the command its call
was waiting on. A command left running past a yield goes on until it ends or
its timeout passes; corral mcp waits for those before it exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if session != "" {
				if err := store.CheckName(session); err != nil {
					return usageErr("--session: %v", err)
				}
			}
			return mcpMain(session, httpAddr, noAgentEnv, stderr)
		},
	}
	fl := c.Flags()
	fl.StringVar(&session, "session", "", "default session (default: one named after the working directory)")
	fl.StringVar(&httpAddr, "http", "", "serve streamable HTTP on ADDR instead of stdio")
	fl.BoolVar(&noAgentEnv, "no-agent-env", false, "do not set PAGER, GIT_PAGER, GIT_TERMINAL_PROMPT")
	addTargetFlags(c)
	return c
}

func mcpMain(session, httpAddr string, noAgentEnv bool, stderr io.Writer) error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	wd, _ := os.Getwd()
	cfg := mcpserver.Config{
		Dial: func(context.Context) (mcpserver.Daemon, error) {
			c, err := dial(dir, true)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		StateDir: dir, Session: session, Dir: wd, Env: os.Environ(), NoAgentEnv: noAgentEnv, Version: "dev",
	}
	if err := mcpRemote(&cfg); err != nil {
		return err
	}
	s, err := mcpserver.New(cfg)
	if err != nil {
		return &exitError{code: exitInternal, msg: err.Error()}
	}
	// SIGTERM, SIGINT or SIGHUP: nobody is left to wait on the jobs. They
	// are stopped first, so that the calls waiting on them end and the
	// transport can close (it waits for the calls in flight).
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sig.Done():
			s.StopAll()
			cancel()
		case <-ctx.Done():
		}
	}()
	if httpAddr == "" {
		err = s.NewMCP().Run(ctx, &mcp.StdioTransport{})
	} else {
		err = serveMCPHTTP(ctx, s, dir, httpAddr, stderr)
	}
	if sig.Err() != nil {
		s.StopAll() // and any job started since
	}
	s.Close()
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) && !errors.Is(err, mcp.ErrConnectionClosed) {
		return &exitError{code: exitInternal, msg: "mcp: " + err.Error()}
	}
	return nil
}

func serveMCPHTTP(ctx context.Context, s *mcpserver.Server, dir, addr string, stderr io.Writer) error {
	token, err := mcpToken(dir)
	if err != nil {
		return &exitError{code: exitInternal, msg: "mcp-token: " + err.Error()}
	}
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &exitError{code: exitInternal, msg: err.Error()}
	}
	m := s.NewMCP()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", bearer(token, cancelWhenGone(h)))
	// Any local user can reach a loopback port: a refused request's
	// connection is closed (bearer), an idle one goes after a minute, a
	// request gets 5 s for its headers, and at most mcpMaxConns
	// connections are served at once, so no one can use up the server's
	// descriptors and lock the agent out. No read or write timeout: a
	// call's response streams for up to its yield, and an SSE stream for
	// as long as the client keeps it.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	ln = netutil.LimitListener(ln, mcpMaxConns)
	fmt.Fprintf(stderr, "corral mcp: serving http://%s/mcp (token in %s)\n", ln.Addr(), filepath.Join(dir, "mcp-token"))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(sctx)
		cancel()
		err = <-served
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// mcpMaxConns bounds the HTTP connections served at once; more wait in the
// listen backlog.
const mcpMaxConns = 256

// bearer lets through only requests with "Authorization: Bearer token";
// the connection of any other is closed after its 401.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
			w.Header().Set("Connection", "close")
			http.Error(w, "corral mcp: a valid Authorization: Bearer token is required (see mcp-token in the state directory)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// mcpToken reads the state directory's mcp-token, making it (mode 0600)
// on first use. The state directory is checked as ours and closed to
// others (stateDir), so only its owner could have put the file there; one
// that is not a regular file only its owner can read is refused.
func mcpToken(dir string) (string, error) {
	path := filepath.Join(dir, "mcp-token")
	var b [32]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
		_, werr := f.WriteString(tok + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(path)
			return "", werr
		}
		return tok, nil
	} else if !os.IsExist(err) {
		return "", err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s: not a regular file only its owner can read (want mode 0600)", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok = strings.TrimSpace(string(data))
	if len(tok) < 32 {
		return "", fmt.Errorf("%s: token too short", path)
	}
	return tok, nil
}
