// Package matrix runs a test once per containment backend and once per
// shell that this machine offers, as subtests, and skips, saying why, each
// one it lacks: a shell not installed, a cgroup v2 this user may not write.
//
// Two environment variables narrow the matrix (to see the skip path on a
// machine that has everything, or to focus a run): CORRAL_TEST_SHELLS and
// CORRAL_TEST_ISOLATIONS, comma-separated lists of the names to keep.
//
// It is a package of its own, beside testproc rather than in it, because
// it asks internal/contain what this machine offers, and contain's own
// tests use testproc.
package matrix

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/corral-dev/corral/internal/contain"
)

// Environment variables that narrow the matrix.
const (
	ShellsEnv     = "CORRAL_TEST_SHELLS"
	IsolationsEnv = "CORRAL_TEST_ISOLATIONS"
)

// AllShells are the shells the suites cover.
var AllShells = []string{"bash", "dash"}

// AllIsolations are the containment backends of this platform, strongest
// first.
func AllIsolations() []string {
	switch runtime.GOOS {
	case "linux":
		return []string{string(contain.Cgroup), string(contain.Pgroup)}
	case "windows":
		return []string{string(contain.Job)}
	}
	return []string{string(contain.Pgroup)}
}

// Isolations runs f as a subtest named after each backend, skipping those
// this machine or user lacks.
func Isolations(t *testing.T, f func(t *testing.T, iso string)) {
	t.Helper()
	for _, iso := range AllIsolations() {
		t.Run(iso, func(t *testing.T) {
			NeedIsolation(t, iso)
			f(t, iso)
		})
	}
}

// Shells runs f as a subtest named after each shell, skipping those that
// are not installed.
func Shells(t *testing.T, f func(t *testing.T, sh string)) {
	t.Helper()
	for _, sh := range AllShells {
		t.Run(sh, func(t *testing.T) {
			NeedShell(t, sh)
			f(t, sh)
		})
	}
}

// ShellsAndIsolations runs f for each shell under each backend, as
// subtests named "shell/isolation".
func ShellsAndIsolations(t *testing.T, f func(t *testing.T, sh, iso string)) {
	t.Helper()
	for _, sh := range AllShells {
		for _, iso := range AllIsolations() {
			t.Run(sh+"/"+iso, func(t *testing.T) {
				NeedShell(t, sh)
				NeedIsolation(t, iso)
				f(t, sh, iso)
			})
		}
	}
}

// Shell returns the first of the shells named that is available, for a
// test that needs a shell but not a particular one; it skips the test if
// none is.
func Shell(t testing.TB, prefer ...string) string {
	t.Helper()
	var why []string
	for _, sh := range prefer {
		if err := shellMissing(sh); err != nil {
			why = append(why, err.Error())
			continue
		}
		return sh
	}
	t.Skipf("no shell for this test: %s", strings.Join(why, "; "))
	return ""
}

// NeedShell skips the test, saying why, unless sh is available.
func NeedShell(t testing.TB, sh string) {
	t.Helper()
	if err := shellMissing(sh); err != nil {
		t.Skip(err)
	}
}

// NeedIsolation skips the test, saying why, unless the backend iso can
// contain trees here, for this user.
func NeedIsolation(t testing.TB, iso string) {
	t.Helper()
	if err := isolationMissing(iso); err != nil {
		t.Skip(err)
	}
}

func shellMissing(sh string) error {
	if !kept(ShellsEnv, sh) {
		return fmt.Errorf("%s: left out by %s=%s", sh, ShellsEnv, os.Getenv(ShellsEnv))
	}
	if _, err := exec.LookPath(sh); err != nil {
		return fmt.Errorf("%s: not installed here: %w", sh, err)
	}
	return nil
}

func isolationMissing(iso string) error {
	if !kept(IsolationsEnv, iso) {
		return fmt.Errorf("%s: left out by %s=%s", iso, IsolationsEnv, os.Getenv(IsolationsEnv))
	}
	if !slices.Contains(AllIsolations(), iso) {
		return fmt.Errorf("%s: not a backend of %s", iso, runtime.GOOS)
	}
	if iso == string(contain.Cgroup) {
		if _, err := contain.CgroupBase(); err != nil {
			return fmt.Errorf("cgroup: not available to uid %d here: %w", os.Geteuid(), err)
		}
	}
	return nil
}

// kept reports whether the list in the environment variable env (all if
// unset or empty) holds name.
func kept(env, name string) bool {
	v := os.Getenv(env)
	if v == "" {
		return true
	}
	for _, f := range strings.Split(v, ",") {
		if strings.TrimSpace(f) == name {
			return true
		}
	}
	return false
}
