//go:build linux

package session

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
)

// lowestFreeFd is the descriptor number the next open would get.
func lowestFreeFd(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return uint64(f.Fd())
}

// TestStdinWithoutDescriptorsFailsToStart: on a process out of file
// descriptors (EMFILE), a command given stdin used to hang for ever: the
// shell was told to open the stdin FIFO for reading, and waited in open(2)
// for the writer we had failed to open. Now the command fails to start,
// saying why, before the shell is told anything, and the session goes on
// unharmed.
func TestStdinWithoutDescriptorsFailsToStart(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		mustRun(t, s, "export KEPT=1")
		var old syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		restore := func() {
			once.Do(func() {
				if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
					t.Errorf("restoring RLIMIT_NOFILE: %v", err)
				}
			})
		}
		t.Cleanup(restore)
		low := old
		low.Cur = lowestFreeFd(t) // no new descriptor from here on
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
			t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
		}
		// The shortage is transient: the rest of this process (and the
		// code before the fix, whose shell waits in open(2)) gets its
		// descriptors back after a bounded time.
		timer := time.AfterFunc(2*time.Second, restore)
		defer timer.Stop()
		var out strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := s.Exec(ctx, "cat", Options{Stdin: strings.NewReader("in\n"), Stdout: &out, Timeout: 5 * time.Second})
		cancel()
		restore()
		if err == nil || r.Outcome != corral.OutcomeStartFailed || !strings.Contains(r.Error, "too many open files") {
			t.Fatalf("out of descriptors: want a start failure naming EMFILE, got %+v %v", r, err)
		}
		out.Reset()
		r, err = s.Exec(context.Background(), "cat; echo $KEPT", Options{Stdin: strings.NewReader("in\n"), Stdout: &out, Timeout: 5 * time.Second})
		if err != nil || out.String() != "in\n1\n" {
			t.Fatalf("after the failed start: %q %+v %v", out.String(), r, err)
		}
		if st := s.State(); st.Resets != 0 || !st.Alive {
			t.Fatalf("the session was harmed: %+v", st)
		}
	})
}

// TestStdinWholeAndInTime: with our ends open before the command starts,
// the command still gets all of its input and end of file: input larger
// than a pipe holds, and input whose end comes long after the shell
// opened the FIFO, and input that ended long before the command reads.
func TestStdinWholeAndInTime(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		big := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB
		out, errs, r, err := run(t, s, "wc -c", Options{Stdin: strings.NewReader(big)})
		if err != nil || strings.TrimSpace(out) != "4194304" {
			t.Fatalf("4 MiB of stdin: %q %q %+v %v", out, errs, r, err)
		}
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte("early\n"))
			time.Sleep(300 * time.Millisecond)
			pw.Write([]byte("late\n"))
			pw.Close()
		}()
		out, errs, r, err = run(t, s, "cat; echo eof", Options{Stdin: pr})
		if err != nil || out != "early\nlate\neof\n" {
			t.Fatalf("slow stdin: %q %q %+v %v", out, errs, r, err)
		}
		// The command reads only after a second: the input has ended
		// long before.
		out, errs, r, err = run(t, s, "sleep 1; cat; echo eof", Options{Stdin: strings.NewReader("kept\n")})
		if err != nil || out != "kept\neof\n" {
			t.Fatalf("stdin read late: %q %q %+v %v", out, errs, r, err)
		}
	})
}

// BenchmarkExecStdin: Exec("cat") fed four bytes on a warm session; the
// stdin path makes a FIFO and opens our ends of it for each command.
func BenchmarkExecStdin(b *testing.B) {
	for _, v := range []string{"bash", "dash-held"} {
		b.Run(v, func(b *testing.B) {
			sh, held := strings.CutSuffix(v, "-held")
			cfg := Config{Shell: sh, Dir: os.TempDir()}
			if held {
				cfg.HoldDir = b.TempDir()
				os.Chmod(cfg.HoldDir, 0o700) // a HoldDir must be private
			}
			s, err := New(cfg)
			if err != nil {
				b.Skip(err)
			}
			defer s.Close()
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Exec(ctx, "cat", Options{Stdin: strings.NewReader("abc\n"), Stdout: io.Discard}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// readsAfter is a reader that notes a Read made after its owner said it
// was done with it (done).
type readsAfter struct {
	mu       sync.Mutex
	done     bool
	lateRead bool
	r        io.Reader
}

func (r *readsAfter) Read(p []byte) (int, error) {
	r.mu.Lock()
	r.lateRead = r.lateRead || r.done
	r.mu.Unlock()
	return r.r.Read(p)
}

// TestExecIsDoneWithStdinWhenItReturns: a command that never reads its
// stdin may end before the copy from the caller's reader has started;
// Exec returned then, and the copy read the caller's reader afterwards,
// while the caller (here the next command) used it (the race detector
// caught it in CI, two copies on one strings.Reader). The hook delays the
// copy's start past the command's end; before the fix the reader was read
// after Exec had returned.
func TestExecIsDoneWithStdinWhenItReturns(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		testHookFeed = func() { time.Sleep(200 * time.Millisecond) }
		defer func() { testHookFeed = nil }()
		for i := 0; i < 3; i++ {
			src := &readsAfter{r: strings.NewReader("unread\n")}
			if _, _, r, err := run(t, s, "true", Options{Stdin: src, Timeout: 10 * time.Second}); err != nil {
				t.Fatalf("%+v %v", r, err)
			}
			src.mu.Lock()
			src.done = true
			src.mu.Unlock()
			time.Sleep(300 * time.Millisecond) // the copy, had it gone on, has read by now
			src.mu.Lock()
			late := src.lateRead
			src.mu.Unlock()
			if late {
				t.Fatal("the command's stdin was read after Exec returned")
			}
		}
	})
}
