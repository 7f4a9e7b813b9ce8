//go:build linux

package session

import "testing"

// TestDollarZeroIsTheShell: in a bash session $0 is "bash", as in bash -c
// CODE, not the channel the shell reads its commands from (/dev/fd/3).
func TestDollarZeroIsTheShell(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		if shellName(s) != "bash" {
			t.Skip("only bash can set $0 from inside (BASH_ARGV0); dash's $0 stays /dev/fd/3 (see the README)")
		}
		if got := mustRun(t, s, `echo "$0"`); got != "bash\n" {
			t.Fatalf("$0 is %q, want bash", got)
		}
	})
}
