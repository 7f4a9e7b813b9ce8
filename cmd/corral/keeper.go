package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/keeper"
	"github.com/corral-dev/corral/session"
)

// keeperRole is the name under which the daemon starts this binary as a
// keeper: argv[1] == keeperRole.
const keeperRole = "__keeper"

// keeperMain runs the keeper of one session: it serves the session on its
// socket, says "ready" on descriptor 3 once it does, and exits when asked
// to shut down or on SIGTERM (closing the session first).
func keeperMain(args []string) int {
	fs := flag.NewFlagSet(keeperRole, flag.ContinueOnError)
	name := fs.String("name", "", "session name")
	sock := fs.String("socket", "", "socket path")
	shell := fs.String("shell", "", "shell")
	dir := fs.String("dir", "", "initial working directory")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	// The session's environment is ours, less the keeper tree's marker.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, corral.MarkerEnv+"=") {
			env = append(env, kv)
		}
	}
	k, err := keeper.Listen(keeper.Config{Name: *name, Socket: *sock,
		Session: session.Config{Shell: *shell, Dir: *dir, Env: env, TrackEnv: true}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral keeper %s: %v\n", *name, err)
		return exitInternal
	}
	if ready := os.NewFile(3, "ready"); ready != nil {
		ready.Write([]byte("ready\n"))
		ready.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// A terminal's hang-up or Ctrl-C is not for the keeper. Caught, not
	// ignored: an ignored signal would stay ignored in every command of
	// the session.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP, syscall.SIGINT)
	if err := k.Serve(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "corral keeper %s: %v\n", *name, err)
		return exitInternal
	}
	return 0
}
