//go:build linux

package session

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestMergedOutputKeepsOrder: a command given one writer for stdout and
// stderr (what a caller that merges them passes, and what corral exec does
// when its own stdout and stderr are one file) gets its stderr on its
// stdout, so the lines come back in exactly the order it wrote them; the
// command after it has its streams apart again.
func TestMergedOutputKeepsOrder(t *testing.T) {
	const code = `i=1; while [ $i -le 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`
	var want strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&want, "out%d\nerr%d\n", i, i)
	}
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		for try := 0; try < 3; try++ {
			var out bytes.Buffer
			r, err := s.Exec(context.Background(), code, Options{Stdout: &out, Stderr: &out})
			if err != nil || r.ExitCode != 0 {
				t.Fatalf("%+v %v", r, err)
			}
			if out.String() != want.String() {
				t.Fatalf("try %d: merged output out of order:\n%.300s", try, out.String())
			}
		}
		out, errs, _, _ := run(t, s, "echo o; echo e >&2")
		if out != "o\n" || errs != "e\n" {
			t.Fatalf("the next command's streams: %q %q", out, errs)
		}
	})
}
