//go:build linux

package main

import (
	"os/exec"
	"testing"
)

// lookTools finds each named program on PATH and returns its path by
// name; the test is skipped, saying which, if one is missing. Tests that
// hand these paths to a command run under env -i need them absolute.
func lookTools(t *testing.T, names ...string) map[string]string {
	t.Helper()
	tools := map[string]string{}
	for _, name := range names {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s not found: %v", name, err)
		}
		tools[name] = p
	}
	return tools
}
