//go:build unix

package tlsdir

import (
	"os"
	"syscall"
)

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

// foreign reports whether fi belongs to a user other than this process's.
func foreign(fi os.FileInfo) (uid int, ok bool) {
	if st, isStat := fi.Sys().(*syscall.Stat_t); isStat && int(st.Uid) != os.Geteuid() {
		return int(st.Uid), true
	}
	return 0, false
}
