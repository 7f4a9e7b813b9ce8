package corral_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
)

// Every benchmark here runs its baseline and its subject alternately in the
// same loop and reports both times and their ratio: the machine is shared
// and noisy, so only a ratio taken in one run means anything.

type pair struct{ base, subj time.Duration }

func (p *pair) report(b *testing.B, unit string) {
	b.ReportMetric(float64(p.base.Microseconds())/float64(b.N)/1000, "base-ms/op")
	b.ReportMetric(float64(p.subj.Microseconds())/float64(b.N)/1000, "corral-ms/op")
	b.ReportMetric(float64(p.subj)/float64(p.base), unit)
}

func timed(f func()) time.Duration {
	t := time.Now()
	f()
	return time.Since(t)
}

// BenchmarkOverheadPgroup: Run of /bin/true in a process group against
// exec.Command("/bin/true").Run(). Goal: ratio <= 1.3.
func BenchmarkOverheadPgroup(b *testing.B) {
	var p pair
	for i := 0; i < b.N; i++ {
		p.base += timed(func() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		})
		p.subj += timed(func() {
			c := corral.Command("/bin/true")
			c.Isolation = corral.IsolationPgroup
			if _, err := c.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
	p.report(b, "x-exec")
}

// BenchmarkOverheadCgroup: Run of /bin/true in a fresh cgroup against the
// bare minimum for the same containment: mkdir a cgroup, clone3 into it
// (exec.Cmd with UseCgroupFD), wait, rmdir. Goal: ratio <= 1.2.
func BenchmarkOverheadCgroup(b *testing.B) {
	base := cgroupBaseOrSkip(b)
	var p pair
	for i := 0; i < b.N; i++ {
		p.base += timed(func() {
			dir := filepath.Join(base, fmt.Sprintf("bench-%d", i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			c := exec.Command("/bin/true")
			c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
			if err := c.Run(); err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
			if err := unix.Rmdir(dir); err != nil {
				b.Fatal(err)
			}
		})
		p.subj += timed(func() {
			c := corral.Command("/bin/true")
			c.Isolation = corral.IsolationCgroup
			if _, err := c.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
	p.report(b, "x-bare-cgroup")
}

// BenchmarkOverheadHold: the price of OnStart (the root held on its exec
// stop until the hook returns), against Run without a hook.
func BenchmarkOverheadHold(b *testing.B) {
	var p pair
	for i := 0; i < b.N; i++ {
		p.base += timed(func() {
			if _, err := corral.Command("/bin/true").Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
		p.subj += timed(func() {
			c := corral.Command("/bin/true")
			c.OnStart = func(corral.Identity) error { return nil }
			if _, err := c.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
	p.report(b, "x-nohook")
}

func cgroupBaseOrSkip(b *testing.B) string {
	base, err := contain.CgroupBase()
	if err != nil {
		b.Skipf("no cgroup v2: %v", err)
	}
	return base
}

// treeScript starts n sleepers and says "ready" once they all exist.
func treeScript(n int) string {
	return fmt.Sprintf("i=0; while [ $i -lt %d ]; do sleep 1000 & i=$((i+1)); done; echo ready; wait", n)
}

// readyWriter closes ready on the first write.
type readyWriter struct {
	ready chan struct{}
	done  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if !w.done {
		w.done = true
		close(w.ready)
	}
	return len(p), nil
}

// BenchmarkCancel: from cancelling the context of a Run whose tree has n
// processes until Run has returned (tree gone, cgroup removed), against a
// bare cgroup.kill plus waiting for "populated 0" on the same tree.
// Goal: corral <= 1.1 x base + 5ms.
func BenchmarkCancel(b *testing.B) {
	base := cgroupBaseOrSkip(b)
	for _, n := range []int{10, 100, 1000} {
		for _, grace := range []time.Duration{0, -1} {
			name := fmt.Sprintf("tree=%d/term-then-kill", n)
			if grace < 0 {
				name = fmt.Sprintf("tree=%d/kill", n)
			}
			b.Run(name, func(b *testing.B) {
				var p pair
				var ratios []float64
				for i := 0; i < b.N; i++ {
					bt := bareCgroupCancel(b, base, n)
					ct := corralCancel(b, n, grace)
					p.base += bt
					p.subj += ct
					ratios = append(ratios, float64(ct)/float64(bt))
				}
				p.report(b, "x-bare")
				// On a shared machine one slow pair moves the mean; the
				// median of the pairs' ratios is the steadier figure.
				sort.Float64s(ratios)
				b.ReportMetric(ratios[len(ratios)/2], "x-bare-median")
				over := (p.subj - p.base) / time.Duration(b.N)
				b.ReportMetric(float64(over.Microseconds())/1000, "extra-ms/op")
			})
		}
	}
}

func corralCancel(b *testing.B, n int, grace time.Duration) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	c := corral.Command("/bin/sh", "-c", treeScript(n))
	c.Isolation = corral.IsolationCgroup
	c.Grace = grace
	w := &readyWriter{ready: make(chan struct{})}
	c.Stdout = w
	done := make(chan time.Time)
	go func() {
		c.Run(ctx)
		done <- time.Now()
	}()
	<-w.ready
	start := time.Now()
	cancel()
	return (<-done).Sub(start)
}

func bareCgroupCancel(b *testing.B, base string, n int) time.Duration {
	dir := filepath.Join(base, "bench-cancel")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	fd, _ := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	c := exec.Command("/bin/sh", "-c", treeScript(n))
	c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	unix.Close(fd)
	bufio.NewReader(out).ReadString('\n')
	start := time.Now()
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	waitPopulated0(b, dir)
	el := time.Since(start)
	c.Wait()
	for unix.Rmdir(dir) == unix.EBUSY {
		time.Sleep(time.Millisecond)
	}
	return el
}

func waitPopulated0(b *testing.B, dir string) {
	in, _ := unix.InotifyInit1(unix.IN_CLOEXEC)
	defer unix.Close(in)
	unix.InotifyAddWatch(in, filepath.Join(dir, "cgroup.events"), unix.IN_MODIFY)
	buf := make([]byte, 4096)
	for {
		ev, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if strings.Contains(string(ev), "populated 0") {
			return
		}
		unix.Read(in, buf)
	}
}

// BenchmarkThroughput: 1 GB through Run's stdout relay against reading the
// same stream from a plain pipe. Goal: throughput ratio >= 0.8 (time ratio
// <= 1.25).
func BenchmarkThroughput(b *testing.B) {
	const size = 1 << 30
	script := fmt.Sprintf("head -c %d /dev/zero", size)
	var p pair
	for i := 0; i < b.N; i++ {
		p.base += timed(func() {
			c := exec.Command("/bin/sh", "-c", script)
			out, _ := c.StdoutPipe()
			c.Start()
			buf := make([]byte, 64<<10)
			var n int64
			for {
				k, err := out.Read(buf)
				n += int64(k)
				if err != nil {
					break
				}
			}
			c.Wait()
			if n != size {
				b.Fatalf("read %d", n)
			}
		})
		p.subj += timed(func() {
			c := corral.Command("/bin/sh", "-c", script)
			c.Stdout = io.Discard
			r, err := c.Run(context.Background())
			if err != nil || r.StdoutBytes != size {
				b.Fatalf("%+v %v", r, err)
			}
		})
	}
	p.report(b, "x-time")
	b.ReportMetric(float64(p.base)/float64(p.subj), "throughput-ratio")
	b.SetBytes(size)
}
