//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkMCPExecTrue: exec of "true" through stdio MCP from a go-sdk
// client, in a warm corral session, against a bare go-sdk server whose
// tool forks "sh -c true" per call (testdata/baremcp), in one run. It
// reports the p50 and p99 of each and their ratio.
func BenchmarkMCPExecTrue(b *testing.B) {
	state := b.TempDir()
	env := append(os.Environ(), "CORRAL_TEST_MARK=bench-mcp", "CORRAL_STATE_DIR="+state)
	defer func() {
		for _, args := range [][]string{{"kill", "--all"}, {"daemon", "stop"}} {
			c := exec.Command(corralBin, args...)
			c.Env = env
			c.Run()
		}
	}()
	bare := filepath.Join(b.TempDir(), "baremcp")
	if out, err := exec.Command("go", "build", "-o", bare, "./testdata/baremcp").CombinedOutput(); err != nil {
		b.Fatalf("build baremcp: %v %s", err, out)
	}
	connect := func(path string, args ...string) *mcp.ClientSession {
		c := exec.Command(path, args...)
		c.Env = env
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "0"}, nil).
			Connect(context.Background(), &mcp.CommandTransport{Command: c}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}
	viaCorral := connect(corralBin, "mcp", "--session", "bench")
	defer viaCorral.Close()
	viaBare := connect(bare)
	defer viaBare.Close()
	ctx := context.Background()
	callOnce := func(cs *mcp.ClientSession) time.Duration {
		t := time.Now()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "true"}})
		if err != nil || r.IsError {
			b.Fatalf("exec true: %v %v", err, r)
		}
		return time.Since(t)
	}
	callOnce(viaCorral) // warm: the daemon and the session exist
	callOnce(viaBare)
	n := b.N
	if n < 200 {
		n = 200
	}
	var corral, base []time.Duration
	b.ResetTimer()
	for i := 0; i < n; i++ {
		corral = append(corral, callOnce(viaCorral))
		base = append(base, callOnce(viaBare))
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[int(float64(len(d)-1)*p)].Microseconds()) / 1000
	}
	c50, c99, b50, b99 := pct(corral, 0.5), pct(corral, 0.99), pct(base, 0.5), pct(base, 0.99)
	b.ReportMetric(c50, "corral-p50-ms")
	b.ReportMetric(c99, "corral-p99-ms")
	b.ReportMetric(b50, "bare-sh-p50-ms")
	b.ReportMetric(b99, "bare-sh-p99-ms")
	b.ReportMetric(c50/b50, "p50-ratio")
}

// BenchmarkMCPCancelTree: notifications/cancelled for an exec running a
// tree of 100 processes, to the last of them gone (polled every
// millisecond through /proc), over stdio from a go-sdk client. Reports
// p50 and p99 over at least 30 trees.
func BenchmarkMCPCancelTree(b *testing.B) {
	state := b.TempDir()
	mark := "CORRAL_TEST_MARK=bench-mcp-cancel"
	env := append(os.Environ(), mark, "CORRAL_STATE_DIR="+state)
	defer func() {
		for _, args := range [][]string{{"kill", "--all"}, {"daemon", "stop"}} {
			c := exec.Command(corralBin, args...)
			c.Env = env
			c.Run()
		}
	}()
	c := exec.Command(corralBin, "mcp", "--session", "bench")
	c.Env = env
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "0"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: c}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	n := b.N
	if n < 30 {
		n = 30
	}
	var took []time.Duration
	dir := b.TempDir()
	for i := 0; i < n; i++ {
		pidFile := filepath.Join(dir, "pids"+strconv.Itoa(i))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *mcp.CallToolResult, 1)
		pids := startTree(b, cs, ctx, 100, pidFile, done)
		start := time.Now()
		cancel()
		if !waitAllGone(pids, 10*time.Second) {
			b.Fatal("tree alive 10s after the cancel")
		}
		took = append(took, time.Since(start))
		<-done
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(took[len(took)/2]), "cancel-p50-ms")
	b.ReportMetric(ms(took[int(float64(len(took)-1)*0.99)]), "cancel-p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "cancel-max-ms")
}
