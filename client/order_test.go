//go:build linux

package client_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestExecMergedKeepsOrder: an Exec whose Stdout and Stderr are one writer
// asks the daemon for one stream, and the command's interleaved lines come
// back in the order it wrote them, in a session and as a oneshot.
func TestExecMergedKeepsOrder(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	state, stop := serve(t)
	defer stop()
	c, err := client.Dial(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const code = `i=1; while [ $i -le 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`
	var want strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&want, "out%d\nerr%d\n", i, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, oneshot := range []bool{false, true} {
		for try := 0; try < 3; try++ {
			var out bytes.Buffer
			name := "order"
			if oneshot {
				name = ""
			}
			res, err := c.Exec(ctx, name, code, client.ExecOptions{Stdout: &out, Stderr: &out, Env: env, Oneshot: oneshot})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("oneshot=%v: %+v %v", oneshot, res, err)
			}
			// One stream: the daemon counted all of it as stdout.
			if res.StderrBytes != 0 || res.StdoutBytes != int64(want.Len()) {
				t.Fatalf("oneshot=%v: %d bytes on stdout, %d on stderr: the streams were not merged", oneshot, res.StdoutBytes, res.StderrBytes)
			}
			if out.String() != want.String() {
				t.Fatalf("oneshot=%v try %d: out of order:\n%.300s", oneshot, try, out.String())
			}
		}
	}
	c.Kill(ctx, true)
}
