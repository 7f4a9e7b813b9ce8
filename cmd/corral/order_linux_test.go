package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestMergedOutputKeepsOrderCLI: when corral's own stdout and stderr are
// one open file (2>&1, a terminal, an agent harness reading one pipe),
// corral run and corral exec give the command one channel for both, so
// its interleaved lines come out in the order it wrote them, as under
// bash -c or timeout; with two places they stay apart.
func TestMergedOutputKeepsOrderCLI(t *testing.T) {
	mark := testproc.Guard(t, 120*time.Second)
	state := t.TempDir()
	const code = `i=1; while [ $i -le 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "out%d\nerr%d\n", i, i)
	}
	for _, args := range [][]string{
		{"run", "--", "sh", "-c", code},
		{"exec", "-s", "order", "-c", code},
		{"exec", "--oneshot", "-c", code},
	} {
		for try := 0; try < 3; try++ {
			var both bytes.Buffer
			c := cli(t, mark, state, args...)
			c.Env = append(c.Env, "SHELL=/bin/sh")
			c.Stdout, c.Stderr = &both, &both // os/exec: one pipe for both
			if err := c.Run(); err != nil {
				t.Fatalf("%v: %v\n%s", args[:2], err, both.String())
			}
			if both.String() != want.String() {
				t.Fatalf("%v try %d: out of order:\n%.300s", args[:2], try, both.String())
			}
		}
	}
	out, errs, code_ := runCLI(t, mark, state, "exec", "-s", "order", "-c", "echo o; echo e >&2")
	if code_ != 0 || out != "o\n" || errs != "e\n" {
		t.Fatalf("two places: %q %q %d", out, errs, code_)
	}
	runCLI(t, mark, state, "kill", "order")
	runCLI(t, mark, state, "daemon", "stop")
}
