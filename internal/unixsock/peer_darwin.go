package unixsock

import "golang.org/x/sys/unix"

// uidOf reads the peer's uid with LOCAL_PEERCRED.
func uidOf(fd int) (int, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
