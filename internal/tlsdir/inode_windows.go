package tlsdir

import "os"

// inode is 0 on Windows: os.FileInfo carries no file id there, and size
// and mtime tell versions apart.
func inode(os.FileInfo) uint64 { return 0 }

// foreign is never true on Windows: ownership is an ACL there.
func foreign(os.FileInfo) (uid int, ok bool) { return 0, false }
