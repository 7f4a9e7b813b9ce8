//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/terminal"
)

// BenchmarkTermAttachThroughput: a 16 MiB file cat in a terminal session,
// received by a client attached through the daemon (which relays holder
// and client over its socket) and by one attached to the holder directly
// (the terminal package), alternating in one run; the MB/s of each and
// their ratio (the relay's cost) are reported.
//
//	go test -run '^$' -bench TermAttachThroughput -benchtime 10x ./cmd/corral
func BenchmarkTermAttachThroughput(b *testing.B) {
	bin, _ := benchBinary(b)
	state := b.TempDir()
	env := append(os.Environ(), "CORRAL_TEST_MARK=bench-term", "CORRAL_STATE_DIR="+state)
	run := func(args ...string) {
		c := exec.Command(bin, args...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v %s", args, err, out)
		}
	}
	const size = 16 << 20
	file := filepath.Join(b.TempDir(), "data")
	line := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-+\n"), size/65)
	if err := os.WriteFile(file, line, 0o600); err != nil {
		b.Fatal(err)
	}
	run("term", "open", "bench", "--", "sh")
	defer func() { run("kill", "--all"); run("daemon", "stop") }()
	cl, err := client.Dial(context.Background(), state)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	tm, err := terminal.Dial(context.Background(), filepath.Join(state, "sessions", "bench"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	type stream interface {
		io.ReadWriter
		Close() error
	}
	viaDaemon := func() stream {
		a, err := cl.TermAttach(ctx, "bench", client.TermAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	direct := func() stream {
		a, err := tm.Attach(ctx, terminal.AttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	buf := make([]byte, 256<<10)
	i := 0
	once := func(open func() stream) time.Duration {
		i++
		a := open()
		defer a.Close()
		marker := []byte(fmt.Sprintf("done-%d", i))
		start := time.Now()
		fmt.Fprintf(a, "cat %s; printf '%%s-%%s\\n' done %d\r", file, i)
		var tail []byte
		for !bytes.Contains(tail, marker) {
			n, err := a.Read(buf)
			tail = append(tail, buf[:n]...)
			if len(tail) > 4096 {
				tail = tail[len(tail)-4096:]
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	var dd, dh time.Duration
	b.SetBytes(2 * int64(len(line)))
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		dd += once(viaDaemon)
		dh += once(direct)
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(b.N) * float64(len(line)) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(dd), "daemon-MB/s")
	b.ReportMetric(mbps(dh), "direct-MB/s")
	b.ReportMetric(mbps(dd)/mbps(dh), "daemon/direct")
}
