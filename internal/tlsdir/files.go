package tlsdir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// writeFile writes data to path atomically: a temporary file in the same
// directory, fsynced, then moved into place and the directory fsynced. A
// crash leaves the old file or the new one, never a partial one. With
// replace unset an existing path is not overwritten (the temporary file is
// hard-linked into place, which fails if the name is taken) and the error
// matches ErrExists.
func writeFile(path string, data []byte, perm fs.FileMode, replace bool) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if replace {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", path, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// makeDir creates dir with mode 0700 (its parent must exist) or accepts an
// existing directory that is ours and closed to others. An existing
// symlink, non-directory, or directory others can enter is refused.
func makeDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if err == nil {
		return syncDir(filepath.Dir(dir))
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	return checkDir(dir)
}

// checkDir refuses dir unless it is a real directory closed to others.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (a symlink or a file): %w", dir, ErrUnsafe)
	}
	if uid, ok := foreign(fi); ok {
		return fmt.Errorf("%s belongs to uid %d, not to us (%d): %w", dir, uid, os.Geteuid(), ErrUnsafe)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is open to others (mode %04o; want 0700): %w", dir, fi.Mode().Perm(), ErrUnsafe)
	}
	return nil
}

// checkReadDir refuses a directory credentials are read from if others
// could replace its files (writable by group or others, without the sticky
// bit): a replaced ca.pem or crl.pem would let anyone in. Unlike checkDir it
// follows a symlink and allows a directory others may enter (a mounted
// secret volume often is one): the key files are checked on their own.
func checkReadDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory: %w", dir, ErrUnsafe)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("%s is writable by others (mode %04o): %w", dir, fi.Mode().Perm(), ErrUnsafe)
	}
	return nil
}

// readKey reads a private key file, refusing one others can read.
func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o; want 0600): %w", path, fi.Mode().Perm(), ErrUnsafe)
	}
	return io.ReadAll(f)
}
