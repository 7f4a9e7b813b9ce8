package main

import (
	"runtime/debug"
	"strings"
)

const rootLong = `corral runs commands as contained process trees: every process a command
starts is stopped when it ends, a timeout or a signal stops the whole tree,
and nothing it started outlives it. Named sessions keep a shell between
calls (corral exec), held by a daemon that starts on demand; terminal
sessions keep programs that do not end on a terminal of their own, for
people (corral attach) and agents (corral term).

Exit status:
  the command's own    it ran and exited (128+N if killed by signal N
                       that corral did not send)
  1                    no such session (kill)
  2                    usage: a bad flag or argument, nothing ran
  3                    daemon status: no daemon is running
  122                  --max-output passed; the tree was killed
  123                  a kept descendant held stdout/stderr past --drain
  124                  --timeout passed; the tree was stopped
  125                  corral itself failed (record, isolation, daemon, kill)
  126                  the command cannot be executed
  127                  the command was not found
  128+N                corral received signal N and stopped the tree

Environment:
  CORRAL_STATE_DIR     state directory (records, the daemon's socket and
                       sessions); default $XDG_STATE_HOME/corral, else
                       /var/lib/corral for root, else ~/.local/state/corral
  XDG_STATE_HOME       see CORRAL_STATE_DIR
  CORRAL_ISOLATION     containment when --isolation is not given: auto,
                       cgroup, pgroup (Linux), job (Windows)
  CORRAL_CGROUP_ROOT   the cgroup v2 directory below which trees get their
                       cgroups (a delegated one, for unprivileged users)
  CORRAL_HOST          a remote daemon (HOST:PORT) for exec, ls, kill and
                       daemon status/stop when --host is not given
  CORRAL_TLS_DIR       its TLS credentials when --tls is not given`

const rootExamples = `  corral run --timeout 10 -- make test        # 10 seconds, then SIGTERM, grace, SIGKILL
  corral run --signal INT --timeout 1m -- ./train.py
  corral run --result - -- go build ./...       # the result as JSON after the output
  corral exec -s work -- 'cd src && make'       # one word: shell code
  corral exec -s work -- rm "my file"           # several words: a command and its arguments
  corral exec -s work -c 'echo "$PWD"'          # shell code, explicitly
  corral exec -s work -f long-script.sh         # code from a file (no argv limit)
  corral attach edit -- vim notes.txt          # a terminal session; ctrl-\ detaches
  corral term open repl -- python3; corral term send repl --keys C-d
  corral ls; corral kill work; corral daemon stop`

// version describes this binary from its build information: the module
// version, the VCS revision (with "-dirty" for a modified tree) and the Go
// version it was built with.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown version)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty, when string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		case "vcs.time":
			when = s.Value
		}
	}
	parts := []string{v}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		r := "revision " + rev + dirty
		if when != "" {
			r += " (" + when + ")"
		}
		parts = append(parts, r)
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, ", ")
}
