//go:build linux

package session

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// bareShell is the baseline persistent shell: a shell reading commands on
// stdin, driven with a fixed sentinel, as the simplest harnesses do it.
type bareShell struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startBare(b *testing.B, sh string) *bareShell {
	c := exec.Command(sh)
	in, _ := c.StdinPipe()
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	return &bareShell{cmd: c, in: in, out: bufio.NewReader(out)}
}

func (s *bareShell) roundTrip(b *testing.B) {
	io.WriteString(s.in, "true; echo MARK$?\n")
	line, err := s.out.ReadString('\n')
	if err != nil || line != "MARK0\n" {
		b.Fatalf("bare shell: %q %v", line, err)
	}
}

func (s *bareShell) close() { s.in.Close(); s.cmd.Wait() }

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func usOf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// BenchmarkExecTrue: Exec("true") on a warm session against a round trip
// of a bare persistent shell ("true; echo MARK$?") on the same shell; the
// held variants are sessions held in FIFOs, as the daemon keeps them.
// Goals: p50 within 3x of the bare p50, p99 under 1 ms.
func BenchmarkExecTrue(b *testing.B) {
	for _, v := range []string{"bash", "dash", "bash-held", "dash-held"} {
		b.Run(v, func(b *testing.B) {
			sh, held := strings.CutSuffix(v, "-held")
			matrix.NeedShell(b, sh)
			cfg := Config{Shell: sh, Dir: os.TempDir()}
			if held {
				cfg.HoldDir = b.TempDir()
				os.Chmod(cfg.HoldDir, 0o700) // a HoldDir must be private
			}
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			bare := startBare(b, sh)
			defer bare.close()
			ctx := context.Background()
			for i := 0; i < 100; i++ { // warm both
				bare.roundTrip(b)
				s.Exec(ctx, "true", Options{})
			}
			base := make([]time.Duration, 0, b.N)
			subj := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := time.Now()
				bare.roundTrip(b)
				base = append(base, time.Since(t))
				t = time.Now()
				if _, err := s.Exec(ctx, "true", Options{}); err != nil {
					b.Fatal(err)
				}
				subj = append(subj, time.Since(t))
			}
			b.StopTimer()
			b.ReportMetric(usOf(pct(base, 0.5)), "bare-p50-us")
			b.ReportMetric(usOf(pct(subj, 0.5)), "corral-p50-us")
			b.ReportMetric(usOf(pct(base, 0.99)), "bare-p99-us")
			b.ReportMetric(usOf(pct(subj, 0.99)), "corral-p99-us")
			b.ReportMetric(float64(pct(subj, 0.5))/float64(pct(base, 0.5)), "p50-x-bare")
		})
	}
}

// BenchmarkResetAfterCancel: cancelling a running command (the session
// tree is killed) plus the next Exec("true") (which starts a fresh shell),
// against spawning "bash -c true". Goal: under 3x.
func BenchmarkResetAfterCancel(b *testing.B) {
	s, err := New(Config{Shell: "bash", Dir: os.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var base, subj time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
		base += time.Since(t)

		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan struct{})
		w := &firstWrite{ch: started}
		done := make(chan struct{})
		go func() {
			s.Exec(ctx, "echo up; sleep 60", Options{Stdout: w})
			close(done)
		}()
		<-started
		t = time.Now()
		cancel()
		<-done
		if _, err := s.Exec(context.Background(), "true", Options{}); err != nil {
			b.Fatal(err)
		}
		subj += time.Since(t)
	}
	b.ReportMetric(float64(base.Microseconds())/float64(b.N)/1000, "bash-c-ms/op")
	b.ReportMetric(float64(subj.Microseconds())/float64(b.N)/1000, "reset-ms/op")
	b.ReportMetric(float64(subj)/float64(base), "x-bash-c")
}

type firstWrite struct {
	ch   chan struct{}
	done bool
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if !w.done && strings.Contains(string(p), "up") {
		w.done = true
		close(w.ch)
	}
	return len(p), nil
}
