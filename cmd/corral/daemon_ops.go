package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/corral-dev/corral/internal/daemon/server"
)

// daemonOps is what `corral daemon` takes for the engine that runs it
// (systemd, Kubernetes, Nomad): the health address, the log format and
// the drain bound of a SIGTERM.
type daemonOps struct {
	health    string
	logFormat string
	drain     time.Duration
	holder    string
}

// defaultDrain fits Kubernetes' default grace (30 s) when the pod's
// terminationGracePeriodSeconds leaves room for the last results and the
// core's own bounds (deploy/ sets 45 s).
const defaultDrain = 30 * time.Second

func (o *daemonOps) register(fl *pflag.FlagSet) {
	fl.StringVar(&o.health, "health", "", "serve /healthz, /readyz and /metrics over HTTP on this address (HOST:PORT, or PORT for 127.0.0.1:PORT)")
	fl.StringVar(&o.health, "metrics", "", "the same as --health (the name Prometheus users look for)")
	fl.StringVar(&o.logFormat, "log-format", "text", "the daemon's log lines on stderr: text, or json (one JSON object a line)")
	durationFlag(fl, &o.drain, "drain-timeout", defaultDrain, "on SIGTERM, how long running commands may finish before the daemon exits (a second SIGTERM stops waiting)")
	fl.StringVar(&o.holder, "holder", "", "run terminal sessions' holders with this program (the small corral-holder binary, an absolute path) instead of corral's own holder role")
}

// opsFlagsUnused refuses the flags of a running daemon on `daemon stop`
// or `daemon status`, which would ignore them.
func opsFlagsUnused(fl *pflag.FlagSet, verb string) error {
	for _, name := range []string{"health", "metrics", "log-format", "drain-timeout", "holder"} {
		if fl.Changed(name) {
			return usageErr("daemon %s: --%s is for running the daemon (corral daemon --%s ...), not for %s", verb, name, name, verb)
		}
	}
	return nil
}

// check refuses what the daemon cannot start with, before it opens
// anything.
func (o *daemonOps) check() error {
	if o.logFormat != "text" && o.logFormat != "json" {
		return usageErr("daemon: --log-format %q: want text or json", o.logFormat)
	}
	if o.drain <= 0 {
		return usageErr("daemon: --drain-timeout must be positive (got %v)", o.drain)
	}
	if o.holder != "" {
		if err := checkHolder(o.holder); err != nil {
			return usageErr("daemon: --holder %s: %v", o.holder, err)
		}
	}
	if o.health != "" {
		if _, err := healthAddr(o.health); err != nil {
			return usageErr("daemon: --health: %v", err)
		}
	}
	return nil
}

// logger is the daemon's logger on w, in the chosen format.
func (o *daemonOps) logger(w io.Writer) *slog.Logger {
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// healthAddr is the address to listen on for a --health value: a bare
// port is on the loopback address, as metrics of a machine's daemon are
// for its own engine unless the operator says otherwise.
func healthAddr(v string) (string, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n > 65535 {
			return "", fmt.Errorf("port %d out of range", n)
		}
		return net.JoinHostPort("127.0.0.1", v), nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", fmt.Errorf("want HOST:PORT or PORT, got %q", v)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("want a numeric port, got %q", port)
	}
	return net.JoinHostPort(host, port), nil
}

// listenHealth listens on the health address, if any (before the daemon
// opens anything: a busy port is found before a shell is taken over).
func (o *daemonOps) listenHealth() (net.Listener, error) {
	if o.health == "" {
		return nil, nil
	}
	addr, _ := healthAddr(o.health) // checked
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &exitError{code: exitInternal, msg: fmt.Sprintf("daemon: --health %s: %v (choose another port)", o.health, err)}
	}
	return ln, nil
}

// serveHealth serves s's health on ln (nil: none); the function it
// returns stops it.
func (o *daemonOps) serveHealth(s *server.Server, ln net.Listener, log *slog.Logger) func() {
	if ln == nil {
		return func() {}
	}
	h := s.ServeHealth(ln)
	log.Info("serving health and metrics", "addr", h.Addr().String())
	return func() { h.Close() }
}

// signals is the daemon's context, ended by the first SIGTERM, SIGINT or
// SIGHUP, and a channel closed by the next one (stop waiting for the
// drain). release stops catching them.
func signals() (ctx context.Context, hurry <-chan struct{}, release func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	h := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			cancel()
		case <-done:
			return
		}
		select {
		case <-ch:
			close(h)
		case <-done:
		}
	}()
	return ctx, h, func() { signal.Stop(ch); close(done); cancel() }
}

// checkHolder refuses a --holder that could not run a holder: it must be
// an absolute path (the holder runs in /) to an executable regular file
// that no one but its owner may change (what it runs holds every terminal
// session's input and screen).
func checkHolder(path string) error {
	if !filepath.IsAbs(path) {
		return errors.New("give an absolute path (for example $PWD/bin/corral-holder)")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file (build it with: CGO_ENABLED=0 go build -o bin/corral-holder ./cmd/corral-holder)")
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("others may write to it (mode %v): chmod go-w it", fi.Mode().Perm())
	}
	return nil
}
