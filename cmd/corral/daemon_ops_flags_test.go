//go:build linux

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestDaemonOpsFlagsOnlyForTheDaemon: --health (or --metrics, its other
// name), --log-format and --drain-timeout configure a running daemon; on
// daemon status or stop, which would ignore them, they are a usage error
// saying so, and nothing starts.
func TestDaemonOpsFlagsOnlyForTheDaemon(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	for _, args := range [][]string{
		{"daemon", "status", "--metrics", "9470"},
		{"daemon", "stop", "--health", "9470"},
		{"daemon", "status", "--log-format", "json"},
		{"daemon", "stop", "--drain-timeout", "5s"},
	} {
		_, errs, code := runCLI(t, mark, state, args...)
		flag := strings.TrimPrefix(args[2], "--")
		if code != 2 || !strings.Contains(errs, "--"+flag+" is for running the daemon") {
			t.Errorf("%v: exit %d, %q", args, code, errs)
		}
	}
	if daemonListening(state) {
		t.Fatal("a refused flag started a daemon")
	}
}
