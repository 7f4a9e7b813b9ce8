// Package statedir finds and prepares corral's state directory, where the
// daemon's socket and store, run records and held sessions' FIFOs live.
//
// Whoever can change the state directory, or anything in it, can read and
// forge what corral's daemon sends its shells, so Ensure accepts only a
// directory that is ours alone: not a symbolic link, owned by our
// effective uid, writable by no one else, under ancestors only we or root
// can change (a sticky directory such as /tmp is fine: no one else can
// replace our entry in it). What corral creates inside it (runs/,
// sessions/, sessions/<name>/) must also be closed to everyone else (no
// group or other bits at all). The state directory itself may be
// enterable by others (0755, as a directory made by hand with the usual
// umask is): everything corral puts directly in it is 0600 (socket,
// store, pid file, log) or one of those private directories, so entering
// it shows others only those names. A directory that fails is
// refused with an error that names it, says what is wrong and what to do;
// corral never chmods a directory it did not just create.
package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Env names the variable that overrides the state directory.
const Env = "CORRAL_STATE_DIR"

// ErrUnsafe means a directory is a symbolic link, belongs to another user,
// or lets others in: corral refuses to use it (errors.As finds an
// *UnsafeError with the details).
var ErrUnsafe = errors.New("unsafe state directory")

// UnsafeError says which directory corral refused, why and what to do.
type UnsafeError struct {
	Path    string
	Problem string // "is a symbolic link to /etc", "belongs to uid 1001, not to us (uid 0)", ...
	Fix     string // what the user can do about it
}

func (e *UnsafeError) Error() string {
	return fmt.Sprintf("%s %s: %s; %s", ErrUnsafe, e.Path, e.Problem, e.Fix)
}

func (e *UnsafeError) Unwrap() error { return ErrUnsafe }

// Path returns the state directory: $CORRAL_STATE_DIR, else
// $XDG_STATE_HOME/corral, else /var/lib/corral for root, else
// ~/.local/state/corral (on Windows, %LOCALAPPDATA%\corral).
func Path() (string, error) {
	if d := os.Getenv(Env); d != "" {
		return filepath.Abs(d)
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "corral"), nil
	}
	if runtime.GOOS == "windows" {
		if d := os.Getenv("LOCALAPPDATA"); d != "" {
			return filepath.Join(d, "corral"), nil
		}
	} else if os.Geteuid() == 0 {
		return "/var/lib/corral", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("state directory: set %s: %w", Env, err)
	}
	return filepath.Join(home, ".local", "state", "corral"), nil
}

// Ensure makes sure dir, and each directory of sub below it (sub may be
// empty: "runs", or "sessions", name), exists and is ours alone, and
// returns the path of the last one. What is missing is created with mode
// 0700; what exists is checked, never changed. The checks hold the
// directory open while they look at it (it is opened without following a
// link, then inspected through the open descriptor), and each sub is
// created and opened inside the checked directory above it, so nothing is
// created inside a directory before it has passed. The existing ancestors
// of dir must belong to us or root and not be writable by others unless
// sticky; missing ones are created 0700.
//
// A refused directory comes back as an error wrapping ErrUnsafe. On
// platforms without Unix owners and modes (Windows) only the symbolic-link
// and not-a-directory checks are made: there, the per-user profile
// directory's ACL is what keeps others out.
func Ensure(dir string, sub ...string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return ensure(dir, sub)
}

// Check reports whether the existing directory dir is ours alone (a
// directory of our uid without group or other bits, as Ensure requires of
// what it creates in the state directory) without creating or changing
// anything; a final symbolic link is refused, not followed.
func Check(dir string) error {
	f, err := OpenPrivate(dir)
	if err != nil {
		return err
	}
	return f.Close()
}

// Verify checks the existing state directory dir as Ensure would (its
// ancestors, no link, ours, writable by no one else) without creating or
// changing anything: for a client about to trust the socket in it.
func Verify(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return verify(dir)
}
