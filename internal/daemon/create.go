package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// maxPath bounds a cwd: PATH_MAX on Linux, counting its NUL. A longer path
// cannot be a process's working directory.
const maxPath = 4096

// execSlack is what a session's shell adds to the client's environment
// and argv (its own argv, corral's tree marker): room kept free of the
// kernel's limit so that a session that passed the check can always start.
const execSlack = 4 << 10

// errBadStart is why a session is not created: the class of every error
// checkCreate returns (ErrBadRequest once the core has classed it).
var errBadStart = errors.New("cannot create the session")

// checkCreate validates what a new session is made of before its record
// is written or its shell started: the working directory must be one, and
// its environment must fit in an execve (a record that can never start its
// shell would fail every later client).
func checkCreate(cwd string, env []string) error {
	if cwd != "" {
		fi, err := os.Stat(cwd)
		switch {
		case err != nil:
			return fmt.Errorf("%w: cwd %s: %v", errBadStart, cwd, err)
		case !fi.IsDir():
			return fmt.Errorf("%w: cwd %s is not a directory", errBadStart, cwd)
		}
	}
	return checkExecSize(env)
}

// checkExecSize reports an environment that execve would refuse with
// E2BIG: one string over the kernel's per-string limit, or a total (with
// the pointers to each) over the whole limit for argv and environment.
// Where the limits are not known (execLimits returns 0) it accepts all.
func checkExecSize(env []string) error {
	total, perString := execLimits()
	if total <= 0 {
		return nil
	}
	size, largest := execSlack, ""
	for _, kv := range env {
		if len(kv)+1 > perString {
			return fmt.Errorf("%w: environment variable %s is %d bytes, over the kernel's limit of %d for one string",
				errBadStart, varName(kv), len(kv), perString-1)
		}
		size += len(kv) + 1 + 8 // the string, its NUL, its pointer
		if len(kv) > len(largest) {
			largest = kv
		}
	}
	if size > total {
		return fmt.Errorf("%w: the environment is %d bytes, over the %d a program can be started with here (the largest variable is %s, %d bytes)",
			errBadStart, size-execSlack, total-execSlack, varName(largest), len(largest))
	}
	return nil
}

func varName(kv string) string {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i]
		}
	}
	return kv
}

// remoteStart is where a remote client's command starts: dir if the
// client gave one explicitly (its --cwd), else the daemon's home; the
// daemon's environment with the client's explicit variables (its --env)
// over it. A remote client's own cwd and environment are its machine's,
// and never sent.
func remoteStart(dir string, env []string) (string, []string) {
	if dir == "" {
		dir = "/"
		if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
			if fi, err := os.Stat(home); err == nil && fi.IsDir() {
				dir = home
			}
		}
	}
	return dir, mergeEnv(os.Environ(), env)
}

// mergeEnv is base with each of over's variables set (replacing base's
// entry of the same name).
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	set := make(map[string]bool, len(over))
	for _, kv := range over {
		set[varName(kv)] = true
	}
	for _, kv := range base {
		if !set[varName(kv)] {
			out = append(out, kv)
		}
	}
	return append(out, over...)
}
