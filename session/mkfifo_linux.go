package session

import "golang.org/x/sys/unix"

// mkfifoIn makes the FIFO name in the open directory dfd (dir is its
// path).
func mkfifoIn(dfd int, dir, name string, mode uint32) error {
	return unix.Mkfifoat(dfd, name, mode)
}
