package corral

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// interleave writes 200 lines to stdout and 200 to stderr, alternating, as
// fast as the shell can.
const interleave = `i=1; while [ $i -le 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`

func interleaved() string {
	var b strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&b, "out%d\nerr%d\n", i, i)
	}
	return b.String()
}

// TestSameWriterKeepsOrder: with Stdout and Stderr the same writer (what a
// caller merging them does, and what corral run does when its stdout and
// stderr are the same file), the command writes to one pipe, so the lines
// come back in exactly the order it wrote them, as with bash -c ... 2>&1;
// the bytes are counted and the output limit holds on the merged stream.
func TestSameWriterKeepsOrder(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	for try := 0; try < 5; try++ {
		var out bytes.Buffer
		c := Command("/bin/sh", "-c", interleave)
		c.Env = testproc.Env(mark)
		c.Stdout, c.Stderr = &out, &out
		res, err := c.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := out.String(); got != interleaved() {
			t.Fatalf("try %d: the merged output is out of order:\n%.300s", try, got)
		}
		if res.StdoutBytes+res.StderrBytes != int64(len(interleaved())) {
			t.Fatalf("counted %d+%d bytes, want %d", res.StdoutBytes, res.StderrBytes, len(interleaved()))
		}
	}
	var out bytes.Buffer
	c := Command("/bin/sh", "-c", interleave)
	c.Env = testproc.Env(mark)
	c.Stdout, c.Stderr = &out, &out
	c.MaxOutput = 100
	res, _ := c.Run(context.Background())
	if res.Outcome != OutcomeOutputLimit || out.Len() > 100 {
		t.Fatalf("limit on the merged stream: %s, %d bytes kept", res.Outcome, out.Len())
	}
}
