package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/store"
)

// exitNotRunning is the exit status of 'corral daemon status' when no
// daemon runs, as 'systemctl status' gives for a unit that is not active.
const exitNotRunning = 3

// daemonListening reports whether a daemon answers on dir's socket: a Dial
// without StartDaemon, which starts nothing.
func daemonListening(dir string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, dir)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// noDaemon answers 'daemon stop' and 'daemon status' when no daemon runs:
// stop has nothing to do and succeeds, as 'systemctl stop' of a stopped
// unit does; status says so (as JSON with --json) and exits 3.
func noDaemon(verb string, asJSON bool, dir string, stdout io.Writer) error {
	if verb == "stop" {
		fmt.Fprintln(stdout, "no daemon was running for", dir)
		return nil
	}
	if asJSON {
		json.NewEncoder(stdout).Encode(map[string]any{"running": false, "state_dir": dir})
	} else {
		fmt.Fprintln(stdout, "no daemon is running for", dir)
	}
	return &exitError{code: exitNotRunning}
}

// unrecorded returns those of names that no session record holds (with
// all, it returns names, empty, when there are no records at all, and
// reports !ok if there are some). ok is false when the records cannot be
// read (a daemon starting holds them): then the caller must ask a daemon.
func unrecorded(dir string, names []string, all bool) (missing []string, ok bool) {
	path := filepath.Join(dir, "corral.db")
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return names, true
	}
	st, err := store.Open(path)
	if err != nil {
		return nil, false
	}
	defer st.Close()
	if all {
		n, err := st.Count()
		return names, err == nil && n == 0
	}
	for _, n := range names {
		if _, err := st.Get(n); errors.Is(err, store.ErrNotFound) {
			missing = append(missing, n)
		} else if err != nil {
			return nil, false
		}
	}
	return missing, true
}
