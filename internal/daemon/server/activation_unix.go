//go:build unix

package server

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Socket activation (systemd's LISTEN_FDS protocol, sd_listen_fds(3)):
// a service manager that made the daemon's socket itself (a socket unit:
// deploy/systemd/corral.socket) passes it as descriptor 3, with
// LISTEN_FDS=1 and LISTEN_PID set to the daemon's pid, and keeps it
// listening while no daemon runs: a client that connects then waits in
// its backlog until the manager has started the daemon. Written by hand
// (the protocol is three environment variables and a descriptor; the
// field's go-systemd/activation is a dependency for these few lines, and
// does not check what corral must: which socket it is, and its mode).
//
// The passed socket must be the state directory's corral.sock, a unix
// stream socket that only its owner (this uid) may connect to, or the
// daemon refuses to start, saying what to change in the socket unit. The
// variables are removed from the daemon's environment, and the
// descriptor kept from its children, so nothing the daemon starts takes
// it for its own.

// listenFDsStart is the first passed descriptor (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// activated returns the listening socket a service manager passed for
// sock, or nil if none was passed to this process.
func activated(sock string) (net.Listener, error) {
	fds, pid := os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_PID")
	if fds == "" {
		return nil, nil
	}
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDNAMES")
	if pid != strconv.Itoa(os.Getpid()) {
		return nil, nil // meant for another process (a parent that passed its environment on)
	}
	n, err := strconv.Atoi(fds)
	switch {
	case err != nil || n < 1:
		return nil, fmt.Errorf("socket activation: LISTEN_FDS=%q is not a count of sockets", fds)
	case n > 1:
		return nil, fmt.Errorf("socket activation: %d sockets were passed; corral takes one, its state directory's socket %s (one ListenStream= in the socket unit)", n, sock)
	}
	syscall.CloseOnExec(listenFDsStart)
	f := os.NewFile(listenFDsStart, "LISTEN_FD_3")
	l, err := net.FileListener(f)
	f.Close() // FileListener holds a descriptor of its own
	if err != nil {
		return nil, fmt.Errorf("socket activation: descriptor 3 is not a listening socket (%v): the socket unit needs ListenStream=%s", err, sock)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("socket activation: the passed socket listens on %s, not on a unix socket: the socket unit needs ListenStream=%s", l.Addr(), sock)
	}
	ul.SetUnlinkOnClose(false) // the manager's socket: it outlives this daemon
	if got := ul.Addr().String(); filepath.Clean(got) != filepath.Clean(sock) {
		ul.Close()
		return nil, fmt.Errorf("socket activation: the passed socket is %s, but this daemon's is %s: set ListenStream=%s in the socket unit (or CORRAL_STATE_DIR=%s in the service)",
			got, sock, sock, filepath.Dir(got))
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		ul.Close()
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm()&0o077 != 0 || st == nil || int(st.Uid) != os.Getuid() {
		ul.Close()
		return nil, fmt.Errorf("socket activation: %s is %v, owned by uid %d: it must be a socket of uid %d that only its owner may use (SocketMode=0600, SocketUser= the daemon's user)",
			sock, fi.Mode(), uidOf(st), os.Getuid())
	}
	return ul, nil
}

func uidOf(st *syscall.Stat_t) int {
	if st == nil {
		return -1
	}
	return int(st.Uid)
}
