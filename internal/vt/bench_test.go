package vt

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func plainText(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%6d the quick brown fox jumps over the lazy dog 0123456789 lorem\r\n", i)
	}
	return b.Bytes()
}

func colourText(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "\x1b[01;34mdir%d\x1b[0m  \x1b[01;32mexec%d\x1b[0m  file%d.go  \x1b[38;5;%dm世界\x1b[m\r\n", i, i, i, i%256)
	}
	return b.Bytes()
}

// perCore runs f b.N times on one locked thread and reports MB per second
// of that thread's CPU time ("MB/cpu-s"), which other load on the machine
// does not dilute as it does the wall-clock MB/s.
func perCore(b *testing.B, n int, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.SetBytes(int64(n))
	c0 := threadCPU()
	for b.Loop() {
		f()
	}
	if c := threadCPU() - c0; c > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/c.Seconds()/1e6, "MB/cpu-s")
	}
}

// BenchmarkWritePlain is plain scrolling text through Write at 80×24 (goal
// ≥ 50 MB/s per core).
func BenchmarkWritePlain(b *testing.B) {
	data := plainText(1 << 20)
	v := New(80, 24, Options{})
	perCore(b, len(data), func() { v.Write(data) })
}

// BenchmarkWriteYes is `yes` output: a scroll for every three bytes.
func BenchmarkWriteYes(b *testing.B) {
	data := bytes.Repeat([]byte("y\r\n"), 1<<18)
	v := New(80, 24, Options{})
	perCore(b, len(data), func() { v.Write(data) })
}

// BenchmarkWriteColour is ls --color-like output with wide characters.
func BenchmarkWriteColour(b *testing.B) {
	data := colourText(1 << 20)
	v := New(80, 24, Options{})
	perCore(b, len(data), func() { v.Write(data) })
}

// BenchmarkRedraw is the repaint on reattach of a 120×40 screen with
// 2,000 rows of scrollback (goal < 50 ms).
func BenchmarkRedraw(b *testing.B) {
	v := New(120, 40, Options{})
	v.Write(colourText(200 << 10))
	if v.ScrollbackLen() < 2000 {
		b.Fatalf("only %d rows of scrollback", v.ScrollbackLen())
	}
	var n int
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := threadCPU()
	for b.Loop() {
		n = len(v.Redraw(RedrawOptions{Scrollback: 2000}))
	}
	if c := threadCPU() - c0; c > 0 {
		b.ReportMetric(float64(c.Microseconds())/1000/float64(b.N), "cpu-ms/redraw")
	}
	b.ReportMetric(float64(n), "bytes/redraw")
}

func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestIdleMemory measures 50 idle 80×24 terminals and bounds each one.
func TestIdleMemory(t *testing.T) {
	before := heapAlloc()
	ts := make([]*Terminal, 50)
	for i := range ts {
		ts[i] = New(80, 24, Options{})
		ts[i].Write([]byte("$ "))
	}
	per := (heapAlloc() - before) / uint64(len(ts))
	runtime.KeepAlive(ts)
	t.Logf("idle 80x24 terminal: %d bytes each (50 measured)", per)
	if per > 128<<10 {
		t.Errorf("an idle 80x24 terminal takes %d bytes; bound 128 KiB", per)
	}
}

// TestFloodMemory pushes `yes` output and a 10 MB line without a newline
// through a terminal and checks that memory stays within the scrollback
// budget plus a constant. VT_FLOOD_MB sets the amount of `yes` (default
// 64 MiB; the README figure uses 1024).
func TestFloodMemory(t *testing.T) {
	mb := 64
	if s := os.Getenv("VT_FLOOD_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	const budget = 8 << 20
	const slack = 2 << 20
	before := heapAlloc()
	v := New(80, 24, Options{ScrollbackBytes: budget})
	chunk := bytes.Repeat([]byte("y\r\n"), 1<<16)
	start := time.Now()
	var peak uint64
	for written := 0; written < mb<<20; written += len(chunk) {
		v.Write(chunk)
		if written%(16<<20) < len(chunk) {
			peak = max(peak, heapAlloc()-before)
		}
	}
	el := time.Since(start)
	after := heapAlloc() - before
	t.Logf("%d MiB of yes in %v (%.0f MB/s): heap %d bytes after, %d peak sampled; scrollback %d rows, %d bytes",
		mb, el, float64(mb<<20)/el.Seconds()/1e6, after, peak, v.ScrollbackLen(), v.ScrollbackBytes())
	if after > budget+slack || peak > budget+slack {
		t.Errorf("heap %d (peak %d) bytes over budget %d + %d", after, peak, budget, slack)
	}
	line := bytes.Repeat([]byte("x"), 10<<20)
	v.Write(line)
	after = heapAlloc() - before
	t.Logf("after a 10 MB line: heap %d bytes", after)
	if after > budget+slack {
		t.Errorf("heap %d bytes over budget %d + %d after a 10 MB line", after, budget, slack)
	}
	runtime.KeepAlive(v)
}
