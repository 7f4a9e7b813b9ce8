// Package statedir finds and prepares corral's state directory, where run
// records (and later the daemon's socket and store) live.
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

// Ensure creates dir (and sub, if given) with mode 0700, closes an existing
// dir of ours that others could enter, and refuses one owned by another
// user.
func Ensure(dir string, sub ...string) (string, error) {
	p := filepath.Join(append([]string{dir}, sub...)...)
	if err := os.MkdirAll(p, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("state directory %s: %w", dir, errors.New("not a directory"))
	}
	if runtime.GOOS != "windows" {
		if owner, ok := ownerOf(fi); ok && owner != os.Geteuid() {
			return "", fmt.Errorf("state directory %s belongs to uid %d, not to us (%d)", dir, owner, os.Geteuid())
		}
		if fi.Mode().Perm()&0o077 != 0 {
			// Ours, but others could enter it: close it.
			if err := os.Chmod(dir, 0o700); err != nil {
				return "", fmt.Errorf("state directory %s: %w", dir, err)
			}
		}
	}
	return p, nil
}
