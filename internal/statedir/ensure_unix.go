//go:build unix

package statedir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// dirFlags open a directory without following a final symbolic link.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// fixOther is what to do about a state directory that is not ours alone.
const fixOther = "corral uses only a directory of its own user that no one else can change: remove it if it is not someone else's, or set " + Env + " to another directory"

func ensure(dir string, sub []string) (string, error) {
	parent := filepath.Dir(dir)
	// Nothing is created under an ancestor another user could change.
	if err := checkAncestors(parent); err != nil {
		return "", err
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	if err := checkAncestors(parent); err != nil {
		return "", err
	}
	fd, err := mkdirOpen(unix.AT_FDCWD, dir, dir, 0o022)
	if err != nil {
		return "", err
	}
	path := dir
	for _, s := range sub {
		for _, name := range strings.Split(s, string(filepath.Separator)) {
			if name == "" || name == "." || name == ".." {
				unix.Close(fd)
				return "", fmt.Errorf("state directory: bad subdirectory %q", s)
			}
			path = filepath.Join(path, name)
			nfd, err := mkdirOpen(fd, name, path, 0o077)
			unix.Close(fd)
			if err != nil {
				return "", err
			}
			fd = nfd
		}
	}
	unix.Close(fd)
	return path, nil
}

func verify(dir string) error {
	if err := checkAncestors(filepath.Dir(dir)); err != nil {
		return err
	}
	fd, err := openDir(unix.AT_FDCWD, dir, dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return checkFd(fd, dir, false, 0o022)
}

// OpenPrivate opens the existing directory dir, without following a final
// symbolic link, and returns it if it is ours alone: a directory owned by
// our effective uid with no group or other permission bits. Otherwise the
// error wraps ErrUnsafe. The caller closes the directory; files opened
// relative to it (openat) are in the directory that was checked, whatever
// happens to the path meanwhile.
func OpenPrivate(dir string) (*os.File, error) {
	fd, err := openDir(unix.AT_FDCWD, dir, dir)
	if err != nil {
		return nil, err
	}
	if err := checkFd(fd, dir, false, 0o077); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// mkdirOpen creates name in the directory at (mode 0700) unless it exists,
// opens it without following a link and checks it (refusing the
// permission bits in deny); path names it in errors. It returns the open
// directory.
func mkdirOpen(at int, name, path string, deny uint32) (int, error) {
	created := false
	if err := unix.Mkdirat(at, name, 0o700); err == nil {
		created = true
	} else if err != unix.EEXIST {
		return -1, fmt.Errorf("state directory %s: %w", path, err)
	}
	fd, err := openDir(at, name, path)
	if err != nil {
		return -1, err
	}
	if err := checkFd(fd, path, created, deny); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openDir opens name in at as a directory, not following a symbolic link.
// When that fails it says what is there instead.
func openDir(at int, name, path string) (int, error) {
	for {
		fd, err := unix.Openat(at, name, dirFlags, 0)
		if err == unix.EINTR {
			continue
		}
		if err == nil {
			return fd, nil
		}
		var st unix.Stat_t
		if unix.Fstatat(at, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFLNK:
				target, _ := os.Readlink(path)
				return -1, &UnsafeError{Path: path,
					Problem: fmt.Sprintf("is a symbolic link (to %s), which corral does not follow", target),
					Fix:     "whoever made the link chooses where it leads: remove it, or set " + Env + " to a real directory of your own"}
			case unix.S_IFDIR:
			default:
				return -1, &UnsafeError{Path: path, Problem: "is not a directory",
					Fix: "remove it, or set " + Env + " to a directory of your own"}
			}
		}
		return -1, fmt.Errorf("state directory %s: %w", path, err)
	}
}

// checkFd checks the open directory fd (path in errors): ours, with none
// of the permission bits in deny (0o077: no one else may enter it; 0o022:
// no one else may change what is in it). One that corral has just created
// (created) is made 0700 if a umask left it otherwise; any other is never
// changed.
func checkFd(fd int, path string, created bool, deny uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("state directory %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &UnsafeError{Path: path, Problem: "is not a directory", Fix: "remove it, or set " + Env + " to a directory of your own"}
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return &UnsafeError{Path: path, Problem: fmt.Sprintf("belongs to uid %d, not to us (uid %d)", st.Uid, euid), Fix: fixOther}
	}
	perm := uint32(st.Mode) & 0o777
	if created && perm != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("state directory %s: %w", path, err)
		}
		return nil
	}
	if perm&deny != 0 {
		what := "change what is in it"
		if perm&deny&0o022 == 0 {
			what = "enter it"
		}
		return &UnsafeError{Path: path,
			Problem: fmt.Sprintf("has mode %04o: other users can %s", perm, what),
			Fix:     "if everything in it is yours, make it private yourself (chmod 700 " + path + "); corral never changes the mode of a directory it did not create"}
	}
	return nil
}

// checkAncestors checks every existing directory from the root down to p,
// both as p names them and as they are once symbolic links are resolved:
// each must belong to us or root and must not be writable by others
// unless it is sticky (as /tmp is: others can add entries there, but not
// replace ours). A symbolic link on the way must belong to us or root too
// (in a sticky directory its owner could replace it). Missing ones are
// fine: corral creates them.
func checkAncestors(p string) error {
	if err := walkAncestors(p); err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		return walkAncestors(real)
	}
	return nil
}

func walkAncestors(p string) error {
	var chain []string
	for q := p; ; q = filepath.Dir(q) {
		chain = append(chain, q)
		if filepath.Dir(q) == q {
			break
		}
	}
	euid := os.Geteuid()
	fix := "another user could replace the state directory inside it: set " + Env + " to a directory under directories that only you or root can change"
	for i := len(chain) - 1; i >= 0; i-- {
		q := chain[i]
		var st unix.Stat_t
		if err := unix.Lstat(q, &st); err != nil {
			if err == unix.ENOENT {
				return nil
			}
			return fmt.Errorf("state directory: %s: %w", q, err)
		}
		if st.Uid != 0 && int(st.Uid) != euid {
			return &UnsafeError{Path: q, Problem: fmt.Sprintf("(above the state directory) belongs to uid %d", st.Uid), Fix: fix}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			continue // where it leads is checked as resolved
		case unix.S_IFDIR:
		default:
			return &UnsafeError{Path: q, Problem: "(above the state directory) is not a directory", Fix: "set " + Env + " to a directory of your own"}
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return &UnsafeError{Path: q,
				Problem: fmt.Sprintf("(above the state directory) has mode %04o: others can write in it and it is not sticky", uint32(st.Mode)&0o777),
				Fix:     fix}
		}
	}
	return nil
}
