//go:build !unix

package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ensure, without Unix owners and modes, refuses only what is not a real
// directory (a symbolic link, a junction, a file): who may enter the
// directory is up to its ACL, which corral neither reads nor changes.
func ensure(dir string, sub []string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	path := dir
	paths := []string{dir}
	for _, s := range sub {
		path = filepath.Join(path, s)
		paths = append(paths, path)
	}
	for _, p := range paths {
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("state directory %s: %w", p, err)
		}
		if err := checkPath(p); err != nil {
			return "", err
		}
	}
	return path, nil
}

// OpenPrivate opens the existing directory dir if it is a real directory
// (see ensure: ownership and mode are not checked on this platform).
func OpenPrivate(dir string) (*os.File, error) {
	if err := checkPath(dir); err != nil {
		return nil, err
	}
	return os.Open(dir)
}

func verify(dir string) error { return checkPath(dir) }

func checkPath(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", p, err)
	}
	switch {
	case fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0:
		return &UnsafeError{Path: p, Problem: "is a link, which corral does not follow", Fix: "remove it, or set " + Env + " to a real directory of your own"}
	case !fi.IsDir():
		return &UnsafeError{Path: p, Problem: "is not a directory", Fix: "remove it, or set " + Env + " to a directory of your own"}
	}
	return nil
}
