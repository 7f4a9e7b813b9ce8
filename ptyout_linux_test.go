package corral

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestOutputTTY: with OutputTTY set to a terminal, the root's stdout and
// stderr are a terminal of that size (isatty true, stty size), its output
// is relayed and counted, "\n" is not turned into "\r\n" twice, and a
// resize is copied to the tree's terminal.
func TestOutputTTY(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	m0, s0, err := pty.Open() // the caller's terminal
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer m0.Close()
	defer s0.Close()
	pty.Setsize(m0, &pty.Winsize{Rows: 33, Cols: 77})

	var out testproc.Buffer // read while the relay writes
	resize := make(chan struct{}, 1)
	c := Command("/bin/sh", "-c", `[ -t 1 ] && echo out-tty; [ -t 2 ] && echo err-tty >&2; first=$(stty size <&2); echo "$first"
echo ready; i=0; while [ $i -lt 200 ]; do now=$(stty size <&2); [ "$now" != "$first" ] && { echo "$now"; exit 0; }; sleep 0.05; i=$((i+1)); done; exit 9`)
	c.Env = testproc.Env(mark)
	c.Stdout, c.Stderr = &out, &out
	c.OutputTTY, c.OutputTTYResize = s0, resize
	done := make(chan *Result, 1)
	go func() { r, _ := c.Run(context.Background()); done <- r }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "ready") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	pty.Setsize(m0, &pty.Winsize{Rows: 40, Cols: 100})
	resize <- struct{}{}
	res := <-done
	want := "out-tty\nerr-tty\n33 77\nready\n40 100\n"
	if got := out.String(); got != want || res.ExitCode != 0 {
		t.Fatalf("output %q (want %q), %+v", got, want, res)
	}
	if res.StdoutBytes != int64(len(want)) {
		t.Fatalf("counted %d bytes, want %d", res.StdoutBytes, len(want))
	}
}
