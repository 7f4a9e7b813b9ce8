//go:build linux

package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitBackground waits (bounded) for the session's background output to
// hold stdout and stderr, takes it and returns it.
func waitBackground(t *testing.T, s *Session, stdout, stderr string) Background {
	t.Helper()
	var got Background
	deadline := time.Now().Add(10 * time.Second)
	for {
		b := s.TakeBackground()
		got.Stdout = append(got.Stdout, b.Stdout...)
		got.Stderr = append(got.Stderr, b.Stderr...)
		got.Dropped += b.Dropped
		if string(got.Stdout) == stdout && string(got.Stderr) == stderr {
			return got
		}
		if time.Now().After(deadline) || len(got.Stdout) > len(stdout) || len(got.Stderr) > len(stderr) {
			t.Fatalf("background output %q %q, want %q %q", got.Stdout, got.Stderr, stdout, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBackgroundOutputIsKept: what a command's background job writes after
// the command has ended never lands in another command's output (the next
// one runs meanwhile) and is not lost: the session keeps it, says how much
// (State.BackgroundBytes), and TakeBackground hands it over once.
func TestBackgroundOutputIsKept(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		out := mustRun(t, s, "(sleep 0.3; echo LATE; echo late-err >&2) & echo first")
		if out != "first\n" {
			t.Fatalf("the command: %q", out)
		}
		// The next command runs while the job writes.
		out, errs, _, err := run(t, s, "sleep 0.8; echo second")
		if err != nil || out != "second\n" || errs != "" {
			t.Fatalf("the next command got %q %q %v", out, errs, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for s.State().BackgroundBytes < int64(len("LATE\nlate-err\n")) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := s.State().BackgroundBytes; n != int64(len("LATE\nlate-err\n")) {
			t.Fatalf("State().BackgroundBytes %d", n)
		}
		waitBackground(t, s, "LATE\n", "late-err\n")
		if b := s.TakeBackground(); len(b.Stdout)+len(b.Stderr) != 0 || s.State().BackgroundBytes != 0 {
			t.Fatalf("taken twice: %+v", b)
		}
		// Bounded: the latest BackgroundMax bytes of a stream are kept.
		done := filepath.Join(t.TempDir(), "done")
		mustRun(t, s, "(sleep 0.2; head -c "+itoa(BackgroundMax+1000)+" /dev/zero | tr '\\0' x; echo END; : >"+done+") &")
		deadline = time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(done); err == nil && s.State().BackgroundBytes == BackgroundMax {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // the reader has what came before done
		b := s.TakeBackground()
		if total := int64(len(b.Stdout)) + b.Dropped; total != BackgroundMax+1000+4 || len(b.Stdout) > BackgroundMax || !strings.HasSuffix(string(b.Stdout), "xEND\n") {
			t.Fatalf("bounded: kept %d dropped %d", len(b.Stdout), b.Dropped)
		}
		if got := mustRun(t, s, "echo ok"); got != "ok\n" {
			t.Fatalf("after: %q", got)
		}
	})
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}
