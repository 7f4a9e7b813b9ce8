package main

import (
	"fmt"
	"os"

	"github.com/corral-dev/corral"
)

// isolationEnv names the environment variable that selects the isolation
// of 'corral run' (when --isolation is not given) and of the daemon's
// sessions and oneshots.
const isolationEnv = "CORRAL_ISOLATION"

// isolationOf returns the isolation asked for: the flag's value if it was
// given (set), else $CORRAL_ISOLATION, else auto.
func isolationOf(flag string, set bool) (corral.Isolation, error) {
	v, what := flag, "--isolation"
	if !set {
		v, what = os.Getenv(isolationEnv), isolationEnv
		if v == "" {
			v = "auto"
		}
	}
	switch v {
	case "auto", "cgroup", "pgroup", "job":
		return corral.Isolation(v), nil
	}
	return "", usageErr("%s: want auto, cgroup, pgroup or job, got %q", what, v)
}

// checkDaemonIsolation compares the isolation this client asks for
// ($CORRAL_ISOLATION) with the one the running daemon contains new
// sessions and oneshots with (running; "" from a daemon too old to say).
// A difference is an error: the command would run under a containment
// other than the one asked for, which, asked for cgroup and given pgroup,
// is a weaker one.
func checkDaemonIsolation(running string, pid int32) error {
	want, err := isolationOf("", false)
	if err != nil || want == corral.IsolationAuto || running == "" || running == string(want) {
		return err
	}
	return &exitError{code: exitInternal, msg: fmt.Sprintf("%s=%s, but the running daemon (pid %d) contains sessions with %s; "+
		"stop it ('corral daemon stop': sessions keep running) to start one with %s, or unset %s",
		isolationEnv, want, pid, running, want, isolationEnv)}
}
