package tlsdir

import (
	"os"

	"golang.org/x/sys/windows"
)

// syncDir is a no-op on Windows: a directory cannot be opened for sync
// there, and NTFS journals the rename itself.
func syncDir(string) error { return nil }

// lockDir takes an exclusive lock on dir's lock file, so that two issues or
// revokes do not both rewrite the index from the same old copy.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(lockPath(dir), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	ol := new(windows.Overlapped)
	if err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, ol); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
