package contain

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/proc"
)

func best() Isolation {
	if _, err := cgroupBase(); err == nil {
		return Cgroup
	}
	return Pgroup
}

func start(iso Isolation, spec *Spec) (Tree, error) {
	switch iso {
	case Auto:
		iso = best()
	case Cgroup, Pgroup:
	default:
		return nil, fmt.Errorf("isolation %q: %w", iso, ErrUnsupported)
	}
	if iso == Cgroup {
		return startCgroup(spec)
	}
	return startPgroup(spec)
}

// root is the started root process: its pid, a pidfd on it, and the
// goroutine that learns of its exit.
type root struct {
	pid   int
	pidfd int
	// f owns pidfd once awaitExit has handed it to the poller (nil
	// before); only the goroutine that closes exited sets it.
	f      *os.File
	exited chan struct{}
	status Status
}

// forkExec starts the root in a new process group with sys's extra
// attributes. If spec.Hold is set, the child is started traced: the kernel
// stops it right after execve, before its first user instruction; Hold runs
// then and the child is detached (let go) only if Hold succeeds. fill
// completes the identity once the pid is known.
func forkExec(spec *Spec, sys *syscall.SysProcAttr, ident Identity, keepZombie bool, fill func(*Identity)) (*root, Identity, error) {
	boot, err := proc.BootID()
	if err != nil {
		return nil, ident, err
	}
	ident.BootID = boot
	ident.Marker = spec.Marker
	env := append(spec.Env[:len(spec.Env):len(spec.Env)], spec.Marker)
	fds := make([]uintptr, len(spec.Files))
	for i, f := range spec.Files {
		fds[i] = f.Fd()
	}
	pidfd := -1
	sys.PidFD = &pidfd
	if spec.Setsid {
		// A new session is a new group too (pgid == pid), as the
		// backends count on; setpgid would fail on a session leader.
		sys.Setsid = true
	} else {
		sys.Setpgid = true
	}
	if spec.Foreground {
		sys.Foreground, sys.Ctty = true, 0
	}
	if spec.Hold != nil {
		// The tracer is a thread: fork, wait and detach must all happen
		// on this one.
		sys.Ptrace = true
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	pid, err := syscall.ForkExec(spec.Path, spec.Argv, &syscall.ProcAttr{Dir: spec.Dir, Env: env, Files: fds, Sys: sys})
	if err != nil {
		return nil, ident, &os.PathError{Op: "fork/exec", Path: spec.Path, Err: err}
	}
	if pidfd < 0 {
		// The kernel has no pidfds (before 5.3): we cannot hold the
		// root's identity, so we do not run at all.
		unix.Kill(pid, unix.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		return nil, ident, fmt.Errorf("pidfd: %w", ErrUnsupported)
	}
	r := &root{pid: pid, pidfd: pidfd, exited: make(chan struct{})}
	ident.Pid, ident.Pgid = pid, pid
	if st, err := proc.ReadStat(pid); err == nil {
		ident.StartTime = st.StartTime
	}
	if fill != nil {
		fill(&ident)
	}
	if spec.Hold != nil {
		if err := holdThenRelease(r, spec.Hold, ident); err != nil {
			return nil, ident, err
		}
	}
	go r.wait(keepZombie)
	return r, ident, nil
}

// holdThenRelease waits for the exec stop of a traced child, runs hold and
// detaches the child, or kills and reaps it if hold fails.
func holdThenRelease(r *root, hold func(Identity) error, ident Identity) error {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(r.pid, &ws, syscall.WALL, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			unix.Close(r.pidfd)
			return fmt.Errorf("wait for exec stop: %w", err)
		}
		break
	}
	if !ws.Stopped() {
		// Killed by someone before it ran; it is reaped already.
		unix.Close(r.pidfd)
		return fmt.Errorf("root died before it ran: %v", ws)
	}
	if err := hold(ident); err != nil {
		unix.PidfdSendSignal(r.pidfd, unix.SIGKILL, nil, 0)
		for {
			_, werr := syscall.Wait4(r.pid, &ws, syscall.WALL, nil)
			if werr != syscall.EINTR && (werr != nil || ws.Exited() || ws.Signaled()) {
				break
			}
		}
		unix.Close(r.pidfd)
		return fmt.Errorf("%w: %w", ErrHold, err)
	}
	if err := syscall.PtraceDetach(r.pid); err != nil {
		unix.PidfdSendSignal(r.pidfd, unix.SIGKILL, nil, 0)
		syscall.Wait4(r.pid, &ws, syscall.WALL, nil)
		unix.Close(r.pidfd)
		return fmt.Errorf("release held root: %w", err)
	}
	return nil
}

// wait learns of the root's exit. With keepZombie the root is left
// unreaped, which keeps its pid and process-group id from being reused
// until reap is called.
func (r *root) wait(keepZombie bool) {
	opts := unix.WEXITED
	if keepZombie {
		opts |= unix.WNOWAIT
	}
	var info [128]byte // siginfo_t
	for {
		// No thread sits in waitid for the whole life of the tree: the
		// goroutine parks on the poller until the root has exited, and
		// waitid then returns at once.
		r.awaitExit()
		err := unix.Waitid(unix.P_PIDFD, r.pidfd, (*unix.Siginfo)(unsafe.Pointer(&info)), opts, nil)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			r.status = Status{Code: -1}
		} else {
			r.status = statusOf(info[:])
		}
		break
	}
	close(r.exited)
}

// awaitExit returns once the root has exited. It parks the calling
// goroutine on the runtime's poller, not a thread: the pidfd is made
// non-blocking (so waitid on it never blocks either) and handed to the
// poller, which reports it readable once its process has exited. Where the
// poller cannot take it, it falls back to a blocking poll(2).
func (r *root) awaitExit() {
	ready := func(fd int) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0 || err != nil && err != unix.EINTR
	}
	if r.f == nil && unix.SetNonblock(r.pidfd, true) == nil {
		r.f = os.NewFile(uintptr(r.pidfd), "pidfd")
	}
	if r.f != nil {
		if rc, err := r.f.SyscallConn(); err == nil {
			if rc.Read(func(fd uintptr) bool { return ready(int(fd)) }) == nil {
				return
			}
		}
	}
	fds := []unix.PollFd{{Fd: int32(r.pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}

// closePidfd closes the pidfd, through its os.File if it has one.
func (r *root) closePidfd() {
	if r.f != nil {
		r.f.Close()
		return
	}
	unix.Close(r.pidfd)
}

// statusOf decodes si_code and si_status of a SIGCHLD siginfo.
func statusOf(info []byte) Status {
	code := int32(binary.NativeEndian.Uint32(info[8:]))
	off := 12 // si_pid after signo, errno, code
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16 // the union is 8-aligned
	}
	st := int(int32(binary.NativeEndian.Uint32(info[off+8:])))
	switch code {
	case cldExited:
		return Status{Code: st}
	default: // CLD_KILLED, CLD_DUMPED
		return Status{Code: -1, Signal: st}
	}
}

// reap collects the root's zombie (if it was kept) and closes the pidfd.
func (r *root) reap(keptZombie bool) {
	<-r.exited
	if keptZombie {
		var info [128]byte
		for unix.Waitid(unix.P_PIDFD, r.pidfd, (*unix.Siginfo)(unsafe.Pointer(&info)), unix.WEXITED, nil) == unix.EINTR {
		}
	}
	r.closePidfd()
}

// signalVerified signals pid through a pidfd, after checking that the pidfd
// refers to the process that check accepts (so a pid reused between the
// listing and the signal is never hit). A process that is gone is not an
// error.
func signalVerified(pid int, sig unix.Signal, check func(pid int) bool) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !check(pid) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	return nil
}

// cldExited is si_code CLD_EXITED (the child called exit); the other codes
// of a SIGCHLD siginfo mean it was killed by si_status.
const cldExited = 1
