//go:build linux

package session

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestUmaskIsTheConfigs: a session's shell starts with Config.Umask, not
// this process's, and so does the fresh shell after a reset; a command's
// own umask lasts as long as its shell.
func TestUmaskIsTheConfigs(t *testing.T) {
	old := syscall.Umask(0o022)
	syscall.Umask(old)
	want := uint32(0o077)
	if old == 0o077 {
		want = 0o027
	}
	shellConfigs(t, 60*time.Second, Config{Umask: &want}, func(t *testing.T, cfg Config, mark string) {
		s := newSession(t, cfg, mark)
		file := filepath.Join(t.TempDir(), "f")
		wantText := "00" + string('0'+byte(want>>3&7)) + string('0'+byte(want&7)) + "\n"
		if got := mustRun(t, s, "umask; : >"+file); got != wantText {
			t.Fatalf("umask %q, want %q", got, wantText)
		}
		if fi, err := os.Stat(file); err != nil || uint32(fi.Mode().Perm()) != 0o666&^want {
			t.Fatalf("a file the command made: %v %v, want mode %04o", fi.Mode(), err, 0o666&^want)
		}
		mustRun(t, s, "umask 0002")
		if got := mustRun(t, s, "umask"); got != "0002\n" {
			t.Fatalf("the command's own umask, next command: %q", got)
		}
		runBounded(t, s, "exit 3")
		if got := mustRun(t, s, "umask"); got != wantText {
			t.Fatalf("after a reset: umask %q, want %q", got, wantText)
		}
	})
	if _, err := New(Config{Umask: new(uint32(0o1000))}); err == nil {
		t.Fatal("a umask of 01000 was accepted")
	}
}
