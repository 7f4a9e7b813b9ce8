package corral

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestDuplicateEnvLastWins: an environment naming a variable twice gives
// the command the last value, as os/exec does; passed through as given, a
// C program's getenv would see the first.
func TestDuplicateEnvLastWins(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	var out bytes.Buffer
	// env prints its environment as execve gave it: coreutils' at
	// /usr/bin/env here, busybox's at /bin/env in the VM of .ci/run.
	env, err := exec.LookPath("env")
	if err != nil {
		t.Skipf("no env program: %v", err)
	}
	c := Command(env)
	c.Env = append(testproc.Env(mark), "DUP=first", "OTHER=1", "DUP=last")
	c.Stdout = &out
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var dups []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "DUP=") {
			dups = append(dups, l)
		}
	}
	if len(dups) != 1 || dups[0] != "DUP=last" {
		t.Fatalf("the command's environment has %q, want only DUP=last", dups)
	}
}
