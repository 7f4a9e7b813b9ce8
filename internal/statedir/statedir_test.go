//go:build linux

package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// attackerArena is a place another user can write in, as /tmp is: a
// sticky, world-writable directory, reachable through directories only root
// can change. It returns the arena and an attacker.
func attackerArena(t *testing.T) (string, testproc.User, string) {
	mark := testproc.Guard(t, 30*time.Second)
	u := testproc.NewUser(t)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	pub := filepath.Join(base, "pub")
	if err := os.Mkdir(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return pub, u, mark
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func wantUnsafe(t *testing.T, err error, path, problem string) {
	t.Helper()
	var ue *UnsafeError
	if !errors.Is(err, ErrUnsafe) || !errors.As(err, &ue) {
		t.Fatalf("want an unsafe-directory error for %s, got %v", path, err)
	}
	if ue.Path != path || !strings.Contains(ue.Problem, problem) || ue.Fix == "" {
		t.Fatalf("error %q: want path %s and a problem saying %q, with a fix", err, path, problem)
	}
}

// TestEnsureRefusesAnotherUsersSymlink: a state directory path that
// another user made a symbolic link to a directory of root's (standing in
// for /etc) is refused; the target is neither chmodded nor written in.
// (Before: Ensure followed the link, created runs/ in the target and
// chmodded it to 0700.)
func TestEnsureRefusesAnotherUsersSymlink(t *testing.T) {
	pub, u, mark := attackerArena(t)
	etc := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(etc, 0o755)
	os.Chmod(filepath.Dir(etc), 0o755)
	link := filepath.Join(pub, "x")
	u.Run(t, testproc.Env(mark), "ln -s "+etc+" "+link)

	_, err := Ensure(link, "runs")
	wantUnsafe(t, err, link, "symbolic link")
	if m := mode(t, etc); m.Perm() != 0o755 {
		t.Errorf("the link's target was changed to %v", m)
	}
	if ents, _ := os.ReadDir(etc); len(ents) != 0 {
		t.Errorf("created in the link's target: %v", ents)
	}
	// A link of our own is no better: where it leads is not checked.
	own := filepath.Join(pub, "mine")
	os.Symlink(etc, own)
	_, err = Ensure(own)
	wantUnsafe(t, err, own, "symbolic link")
}

// TestEnsureRefusesAnotherUsersDirectory: a state directory that another
// user created first is refused, and nothing is created inside it.
// (Before: runs/ was created inside it, then it was refused.)
func TestEnsureRefusesAnotherUsersDirectory(t *testing.T) {
	pub, u, mark := attackerArena(t)
	dir := filepath.Join(pub, "y")
	u.Run(t, testproc.Env(mark), "mkdir -m 700 "+dir)
	_, err := Ensure(dir, "runs")
	wantUnsafe(t, err, dir, "belongs to uid")
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("created inside another user's directory: %v", ents)
	}
	// Below a directory of that user's, where they could swap ours.
	u.Run(t, testproc.Env(mark), "chmod 755 "+dir)
	_, err = Ensure(filepath.Join(dir, "corral"))
	wantUnsafe(t, err, dir, "belongs to uid")
	if _, err := os.Lstat(filepath.Join(dir, "corral")); err == nil {
		t.Error("created below another user's directory")
	}
}

// TestEnsureRefusesWhatOthersCanEnter: a state directory, or runs/,
// sessions/ or sessions/<name>/ in it, with group or other bits is refused
// (another user could put files there) and its mode is left as it was.
// (Before: the state directory itself was chmodded, the others accepted.)
func TestEnsureRefusesWhatOthersCanEnter(t *testing.T) {
	pub, u, mark := attackerArena(t)
	dir := filepath.Join(pub, "state")
	if got, err := Ensure(dir, "sessions", "s1"); err != nil || got != filepath.Join(dir, "sessions", "s1") {
		t.Fatalf("Ensure of a fresh state directory under a sticky /tmp-like directory: %q %v", got, err)
	}
	if _, err := Ensure(dir, "runs"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{dir, filepath.Join(dir, "sessions"), filepath.Join(dir, "sessions", "s1"), filepath.Join(dir, "runs")} {
		if p := mode(t, m).Perm(); p != 0o700 {
			t.Fatalf("%s created with mode %v, want 0700", m, p)
		}
	}
	for _, tc := range []struct {
		loose string
		perm  os.FileMode
		sub   []string
	}{
		{"runs", 0o777, []string{"runs"}},
		{"sessions", 0o770, []string{"sessions", "s2"}},
		{"sessions/s1", 0o755, []string{"sessions", "s1"}},
		{"", 0o757, []string{"runs"}},
	} {
		loose := filepath.Join(dir, tc.loose)
		if err := os.Chmod(loose, tc.perm); err != nil {
			t.Fatal(err)
		}
		if tc.perm&0o002 != 0 {
			// It really is open: the other user can write in it (given a
			// way in, for a moment).
			if loose != dir {
				os.Chmod(dir, 0o711)
			}
			u.Run(t, testproc.Env(mark), "touch "+filepath.Join(loose, "planted"))
			if loose != dir {
				os.Chmod(dir, 0o700)
			}
		}
		_, err := Ensure(dir, tc.sub...)
		wantUnsafe(t, err, loose, "other users can")
		if p := mode(t, loose).Perm(); p != tc.perm {
			t.Errorf("%s: mode changed to %v", loose, p)
		}
		if _, err := os.Lstat(filepath.Join(dir, "sessions", "s2")); err == nil {
			t.Errorf("%s: sessions/s2 created below a refused directory", tc.loose)
		}
		os.Chmod(loose, 0o700)
	}
	// A state directory others may enter but not change is fine (all
	// corral puts in it is private); it is left as it is.
	os.Chmod(dir, 0o755)
	if _, err := Ensure(dir, "runs"); err != nil {
		t.Errorf("a 0755 state directory: %v", err)
	}
	if p := mode(t, dir).Perm(); p != 0o755 {
		t.Errorf("mode changed to %v", p)
	}
	// A symbolic link in place of sessions/, made by us or anyone.
	os.Rename(filepath.Join(dir, "sessions"), filepath.Join(dir, "old"))
	os.Symlink(filepath.Join(dir, "old"), filepath.Join(dir, "sessions"))
	_, err := Ensure(dir, "sessions", "s1")
	wantUnsafe(t, err, filepath.Join(dir, "sessions"), "symbolic link")
}

// TestEnsureAncestors: a state directory below a directory others can
// write in without the sticky bit is refused before anything is created.
func TestEnsureAncestors(t *testing.T) {
	pub, _, _ := attackerArena(t)
	open := filepath.Join(pub, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	_, err := Ensure(filepath.Join(open, "a", "state"))
	wantUnsafe(t, err, open, "not sticky")
	if _, err := os.Lstat(filepath.Join(open, "a")); err == nil {
		t.Error("created below a directory others can write in")
	}
	// Missing ancestors are created, private.
	got, err := Ensure(filepath.Join(pub, "b", "c", "state"), "runs")
	if err != nil {
		t.Fatal(err)
	}
	if p := mode(t, filepath.Join(pub, "b")).Perm(); p != 0o700 {
		t.Errorf("created ancestor has mode %v", p)
	}
	if err := Check(filepath.Dir(got)); err != nil {
		t.Errorf("Check of an Ensured directory: %v", err)
	}
}

// TestVerifyCreatesNothing: Verify applies Ensure's rules for the state
// directory to an existing one and creates nothing.
func TestVerifyCreatesNothing(t *testing.T) {
	pub, u, mark := attackerArena(t)
	missing := filepath.Join(pub, "none")
	if err := Verify(missing); err == nil {
		t.Error("Verify of a missing directory succeeded")
	}
	if _, err := os.Lstat(missing); err == nil {
		t.Error("Verify created it")
	}
	theirs := filepath.Join(pub, "theirs")
	u.Run(t, testproc.Env(mark), "mkdir -m 755 "+theirs)
	wantUnsafe(t, Verify(theirs), theirs, "belongs to uid")
	ours := filepath.Join(pub, "ours")
	os.Mkdir(ours, 0o755)
	os.Chmod(ours, 0o755)
	if err := Verify(ours); err != nil {
		t.Errorf("a 0755 directory of ours: %v", err)
	}
}

// BenchmarkEnsure is the cost of checking an existing state directory and
// one session's directory in it, as the daemon does for every new shell.
func BenchmarkEnsure(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "state")
	if _, err := Ensure(dir, "sessions", "s"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Ensure(dir, "sessions", "s"); err != nil {
			b.Fatal(err)
		}
	}
}
