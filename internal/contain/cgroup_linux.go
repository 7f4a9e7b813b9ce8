package contain

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupRootEnv names the environment variable that overrides where corral
// creates its cgroups (a directory in a cgroup v2 hierarchy we may write).
const CgroupRootEnv = "CORRAL_CGROUP_ROOT"

// cgroupBase is the cgroup under which every tree's cgroup is made:
// $CORRAL_CGROUP_ROOT, else "corral" under our own cgroup in the cgroup2
// mount found in /proc/self/mountinfo. It is usable only if it is
// delegated to us (see delegated): a "corral" cgroup that root made is
// not, for anyone else.
var cgroupBase = sync.OnceValues(func() (string, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	self, err := selfCgroup()
	if err != nil {
		return "", err
	}
	selfDir := filepath.Join(mnt, self)
	base := os.Getenv(CgroupRootEnv)
	if base == "" {
		base = filepath.Join(selfDir, "corral")
	}
	base = filepath.Clean(base)
	// Moving a process between two cgroups takes write access to the
	// cgroup.procs of their nearest common ancestor: our own cgroup's
	// for a base below it. Look before making anything.
	if !within(base, mnt) {
		return "", fmt.Errorf("cgroup %s: not in the cgroup2 hierarchy mounted at %s: %w", base, mnt, ErrUnsupported)
	}
	if anc := commonAncestor(selfDir, base); anc != base {
		if err := writable(filepath.Join(anc, "cgroup.procs")); err != nil {
			return "", notDelegated(base, err)
		}
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", notDelegated(base, err)
	}
	for _, f := range []string{"cgroup.kill", "cgroup.freeze", "cgroup.events"} {
		if _, err := os.Stat(filepath.Join(base, f)); err != nil {
			return "", fmt.Errorf("cgroup %s lacks %s (kernel before 5.14?): %w", base, f, ErrUnsupported)
		}
	}
	if err := delegated(base); err != nil {
		return "", notDelegated(base, err)
	}
	return base, nil
})

// delegated checks that we may use the cgroup dir as the parent of our
// trees, as a cgroup delegated to us (systemd's Delegate=yes) allows:
// make cgroups in it, and write its cgroup.procs (the common ancestor of
// a tree's cgroup and the "released" cgroup beside it) and its
// cgroup.subtree_control (to hand controllers such as pids down).
func delegated(dir string) error {
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control")} {
		if err := writable(p); err != nil {
			return err
		}
	}
	return nil
}

// writable reports, as an error naming the path and its owner, whether
// our effective uid may write path (and search it, for a directory).
func writable(path string) error {
	mode := uint32(unix.W_OK)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		mode |= unix.X_OK
	}
	if err := unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS); err != nil {
		return fmt.Errorf("%s (owned by uid %d) is not writable by uid %d: %w", path, st.Uid, os.Geteuid(), err)
	}
	return nil
}

// notDelegated wraps why the cgroup base cannot be used in ErrIsolation,
// with what to do about it.
func notDelegated(base string, err error) error {
	return fmt.Errorf("%w: no cgroup usable by uid %d under %s: %w; delegate a cgroup to this user (run under "+
		"'systemd-run --user --scope -p Delegate=yes', or set %s to a cgroup directory it owns), or use pgroup isolation",
		ErrIsolation, os.Geteuid(), base, err, CgroupRootEnv)
}

// commonAncestor returns the nearest directory that is a or above it, and
// b or above it.
func commonAncestor(a, b string) string {
	for p := a; ; p = filepath.Dir(p) {
		if within(b, p) || p == filepath.Dir(p) {
			return p
		}
	}
}

// within reports whether path is dir or below it (both clean).
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// CgroupBase returns the cgroup directory under which trees are created, or
// an error saying why cgroup isolation is not available.
func CgroupBase() (string, error) { return cgroupBase() }

// cgroup2Mount finds the mount point of the cgroup v2 hierarchy.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		line := s.Text()
		i := strings.Index(line, " - ")
		if i < 0 {
			continue
		}
		after := strings.Fields(line[i+3:])
		before := strings.Fields(line[:i])
		if len(after) > 0 && after[0] == "cgroup2" && len(before) >= 5 {
			return unescapeMount(before[4]), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no cgroup2 mount: %w", ErrUnsupported)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// selfCgroup returns our cgroup v2 path ("0::/path" in /proc/self/cgroup).
func selfCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("not in a cgroup v2 hierarchy: %w", ErrUnsupported)
}

func newTreeID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type cgroupTree struct {
	ident Identity
	dir   string
	root  *root
	// termed holds the pids sent SIGTERM, so that a later Terminate
	// signals only processes that appeared since.
	termed map[int]bool
	// ownGroup: the group may be signalled (once, by Terminate): the
	// root is our child, kept an unreaped zombie until Close, so its
	// process-group id cannot be reused and signalling the group reaches
	// only the tree's processes. Not for an adopted tree, nor once some
	// were released (they keep the group id).
	ownGroup bool
	// groupSent: the group was sent SIGTERM; groupBefore holds the
	// members listed just before that. A process in it that is in the
	// group had the signal and needs no signal of its own.
	groupSent   bool
	groupBefore map[int]bool
	// zombie: the root is left unreaped when it exits, until Close.
	zombie bool
}

func startCgroup(spec *Spec) (Tree, error) {
	base, err := cgroupBase()
	if err != nil {
		return nil, err
	}
	if err := prepareControllers(base, spec.Limits.controllers()); err != nil {
		return nil, err
	}
	dir := filepath.Join(base, "t-"+newTreeID())
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: cgroup: %w", ErrIsolation, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	// The limits are in force before the root exists: it is cloned into
	// the cgroup below.
	if err := applyLimits(dir, fd, spec.Limits); err != nil {
		unix.Close(fd)
		removeCgroup(dir)
		return nil, err
	}
	sys := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	r, ident, err := forkExec(spec, sys, Identity{Isolation: Cgroup, Cgroup: dir}, true, nil)
	unix.Close(fd)
	if err != nil && deniedEntry(err, spec) {
		// clone3 was refused the move into the cgroup, not exec the
		// program (which we may run).
		err = fmt.Errorf("%w: cannot start a process in cgroup %s: %w", ErrIsolation, dir, err)
	}
	if err != nil {
		// Whatever ran (a held root that was killed) is gone; make sure,
		// and remove the cgroup as Close would (retrying while the kernel
		// finishes tearing the dead child down).
		killCgroup(dir)
		waitCgroupEmpty(dir, 2*time.Second)
		if rerr := removeCgroup(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	return &cgroupTree{ident: ident, dir: dir, root: r, termed: map[int]bool{}, ownGroup: true, zombie: true}, nil
}

// deniedEntry reports whether err, from starting spec in a cgroup, is the
// kernel refusing the cgroup rather than the program: fork/exec failed for
// permission although we may execute the program and enter its directory.
func deniedEntry(err error, spec *Spec) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "fork/exec" || !(errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
		return false
	}
	may := func(p string) bool { return unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS) == nil }
	return may(spec.Path) && (spec.Dir == "" || may(spec.Dir))
}

func (t *cgroupTree) Identity() Identity      { return t.ident }
func (t *cgroupTree) Exited() <-chan struct{} { return t.root.exited }
func (t *cgroupTree) Status() Status          { return t.root.status }

func (t *cgroupTree) Members() ([]int, error) { return cgroupProcs(t.dir) }

// Terminate sends SIGTERM to every member not sent one before.
//
// The tree's process group, which holds most trees whole, is signalled
// first with one kill(-pgid): the kernel signals every member in one pass
// (and a fork in flight in the group is restarted so that its child gets
// the signal too). Signalling them one by one instead lets each woken
// process preempt the signaller to tear itself down, which made a graceful
// stop of a 1000-process tree take 1.5 times as long as cgroup.kill. The
// members outside the group (setsid, setpgid) are then signalled one by
// one; those in the group are only marked.
//
// Which members had the group signal is learnt from a listing of the
// cgroup taken just before it and from getpgid: a member listed then and
// in the group now had it. One that is not listed was forked after the
// listing: it gets a signal of its own (two, if its fork ended between the
// listing and the group signal). A listed pid cannot have been reused by a
// later member meanwhile: pids are handed out in turn up to pid_max. This
// costs one listing and a getpgid per member; reading each member's
// /proc/PID/stat for its group and start time instead cost 13-30 us per
// member here (the kernel computes the whole stat line), 13-30 ms for a
// 1000-process tree: most of what a graceful stop took beyond cgroup.kill.
func (t *cgroupTree) Terminate() error {
	if t.ownGroup {
		t.ownGroup = false // once
		if before, err := cgroupProcs(t.dir); err == nil {
			t.groupBefore = make(map[int]bool, len(before))
			for _, pid := range before {
				t.groupBefore[pid] = true
			}
			if err := unix.Kill(-t.ident.Pgid, unix.SIGTERM); err == nil || errors.Is(err, unix.ESRCH) {
				t.groupSent = true
			} // else none had it: each is signalled below
		} // else the group is not signalled: each member is, below
	}
	var inGroup func(pid int) bool
	if t.groupSent {
		inGroup = func(pid int) bool { return hadGroupSignal(pid, t.ident.Pgid, t.groupBefore) }
	}
	return terminateCgroup(t.dir, t.termed, inGroup)
}

// hadGroupSignal reports whether pid surely had the signal sent to group
// pgid just after before was listed: it was listed, and is in the group.
// A member that changed its group around the signal is judged by its group
// now, as by the start-time check this replaced: one that left the group
// after the signal gets a second signal; one that joined it after the
// signal gets none of its own, and is killed with the rest once the grace
// is over.
func hadGroupSignal(pid, pgid int, before map[int]bool) bool {
	if !before[pid] {
		return false
	}
	g, err := unix.Getpgid(pid)
	return err == nil && g == pgid
}

// gotGroupSignal reports whether the member surely had the signal sent to
// group pgid at tick: it is in the group and started in an earlier clock
// tick. A child whose fork was in flight then got it too (the kernel
// restarts such a fork), but one forked just after by a parent that had
// the signal blocked (a shell blocks signals around fork) did not, and it
// starts in the same tick or later: it gets a signal of its own. (A process
// started in the same tick just before the group signal gets two; one
// forked just after must not get none.) The start time is the scan's; the
// group is asked for with getpgid, a small fraction of the cost of reading
// the stat line again (see hadGroupSignal).
func (m member) gotGroupSignal(pgid int, tick uint64) bool {
	if m.start >= tick {
		return false
	}
	g, err := unix.Getpgid(m.pid)
	return err == nil && g == pgid
}

// bootTicks is the time now in the unit of a process's start time: clock
// ticks (USER_HZ, 100 on Linux) after boot, suspend included.
func bootTicks() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0 // nothing counts as signalled by the group
	}
	return uint64(ts.Nano()) / (1e9 / 100)
}

func (t *cgroupTree) Kill() error { return killCgroup(t.dir) }

func (t *cgroupTree) WaitEmpty(timeout time.Duration) error {
	return waitCgroupEmpty(t.dir, timeout)
}

// Release moves pids into the shared "released" cgroup beside the trees,
// so the tree's own cgroup can be removed.
func (t *cgroupTree) Release(pids []int) error {
	t.ownGroup = false // the released keep the group id
	rel := filepath.Join(filepath.Dir(t.dir), "released")
	if err := os.Mkdir(rel, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroup release: %w", err)
	}
	var errs []error
	for _, pid := range pids {
		err := os.WriteFile(filepath.Join(rel, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("release %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

func (t *cgroupTree) Close() error {
	t.root.reap(t.zombie)
	return removeCgroup(t.dir)
}

// removeCgroup removes an empty tree cgroup and the cgroups below it,
// deepest first, retrying briefly while the kernel finishes tearing down
// their last processes.
func removeCgroup(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var err error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err = rmdirRetry(dirs[i]); err != nil {
			break
		}
	}
	return err
}

func rmdirRetry(dir string) error {
	var err error
	for i := 0; i < 100; i++ {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

// cgroupProcs lists the processes of the cgroup and of every cgroup below
// it (a tree's own cgroups, when a command runs corral itself, say a
// daemon whose sessions nest inside): cgroup.procs alone lists only a
// cgroup's own.
func cgroupProcs(dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // a child cgroup removed meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		for _, f := range bytes.Fields(b) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids, err
}

func killCgroup(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("cgroup.kill %s: %w", dir, err)
	}
	return nil
}

// terminateCgroup sends SIGTERM to every process of the cgroup.
//
// It signals in rounds without freezing: list the members, signal the new
// ones, list again. A process killed by SIGTERM cannot fork afterwards, so
// a round finds only children whose fork was in flight during the previous
// one, and the rounds end quickly. Only if they do not (a fork storm, or a
// tree that forks from its TERM handler) is the cgroup frozen, the rest
// signalled, and thawed. Freezing is the fallback, not the first step,
// because each signal to a frozen task makes it leave and re-enter the
// frozen state, which costs about 0.4 ms per process on the kernels
// measured (cgroup.events is updated on both transitions).
//
// Even so, a child whose fork was past the kernel's last signal check when
// its parent got SIGTERM can appear after the rounds have ended; callers
// therefore call it again while they wait (contain.Stop does), and done
// keeps each process from being signalled twice.
//
// Members for which skip reports true are marked done without a signal of
// their own (they had one already: their group's); skip may be nil.
func terminateCgroup(dir string, done map[int]bool, skip func(pid int) bool) error {
	return terminateCgroupWith(dir, unix.SIGTERM, done, skip)
}

// terminateCgroupWith is terminateCgroup sending sig.
func terminateCgroupWith(dir string, sig unix.Signal, done map[int]bool, skip func(pid int) bool) error {
	var errs []error
	for round := 0; round < 4; round++ {
		n, err := signalNew(dir, sig, done, skip)
		if err != nil {
			errs = append(errs, err)
		}
		if n == 0 {
			return errors.Join(errs...)
		}
	}
	freeze := filepath.Join(dir, "cgroup.freeze")
	if err := os.WriteFile(freeze, []byte("1"), 0); err != nil {
		return errors.Join(append(errs, fmt.Errorf("freeze %s: %w", dir, err))...)
	}
	// Signals sent while freezing is still under way are delivered on thaw
	// all the same, so this wait is short and best effort.
	waitCgroupEvent(dir, "frozen", "1", 100*time.Millisecond)
	if _, err := signalNew(dir, sig, done, skip); err != nil {
		errs = append(errs, err)
	}
	if err := os.WriteFile(freeze, []byte("0"), 0); err != nil {
		errs = append(errs, fmt.Errorf("thaw %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// signalNew signals the members of the cgroup that are not in done, adds
// them to done and returns how many there were. Each is signalled through a
// pidfd opened between two listings of cgroup.procs, and only if its pid is
// in both: a pid reused by a foreign process after the first listing is in
// no listing of ours after it, so the pidfd of a stranger is never used.
// Those for which skip (if not nil) reports true are marked done, not
// signalled, and not counted.
func signalNew(dir string, sig unix.Signal, done map[int]bool, skip func(pid int) bool) (int, error) {
	first, err := cgroupProcs(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	fds := map[int]int{}
	for _, pid := range first {
		if done[pid] {
			continue
		}
		done[pid] = true
		if skip != nil && skip(pid) {
			continue
		}
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds[pid] = fd
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) == 0 {
		return 0, nil
	}
	second, err := cgroupProcs(dir)
	if err != nil {
		return len(fds), err
	}
	var errs []error
	for _, pid := range second {
		if fd, ok := fds[pid]; ok {
			if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("signal %d: %w", pid, err))
			}
		}
	}
	return len(fds), errors.Join(errs...)
}

// waitCgroupEmpty waits for "populated 0" in cgroup.events, watching the
// file with inotify rather than polling the process table.
func waitCgroupEmpty(dir string, timeout time.Duration) error {
	return waitCgroupEvent(dir, "populated", "0", timeout)
}

func waitCgroupEvent(dir, key, want string, timeout time.Duration) error {
	events := filepath.Join(dir, "cgroup.events")
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, events, unix.IN_MODIFY); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // the cgroup is gone, so it is empty
		}
		return fmt.Errorf("inotify %s: %w", events, err)
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 4096)
	for {
		v, err := cgroupEvent(events, key)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if v == want {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("cgroup %s: %s is %s: %w", dir, key, v, os.ErrDeadlineExceeded)
		}
		ms := int(left / time.Millisecond)
		if ms < 1 {
			ms = 1
		}
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, ms); err != nil && err != unix.EINTR {
			return fmt.Errorf("poll inotify: %w", err)
		}
		for {
			if _, err := unix.Read(in, buf); err != nil {
				break // drained (EAGAIN)
			}
		}
	}
}

func cgroupEvent(events, key string) (string, error) {
	b, err := os.ReadFile(events)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: no %q", events, key)
}

func (t *cgroupTree) KillProcs(pids []int) error {
	// Mark every member but the chosen ones as done, so that signalNew
	// signals exactly the chosen ones that are still members.
	done := map[int]bool{}
	members, err := cgroupProcs(t.dir)
	if err != nil {
		return err
	}
	for _, m := range members {
		done[m] = true
	}
	for _, p := range pids {
		delete(done, p)
	}
	_, err = signalNew(t.dir, unix.SIGKILL, done, nil)
	return err
}

// LimitTreePids gives the cgroup under which trees are made (CgroupBase) a
// pids limit of its own: reserve below the tightest pids.max of this
// process's cgroup and its ancestors (at most half of it), so that trees
// that use up their limit leave the rest to this process. It returns the
// limit set, or 0 if no pids limit is above us (nothing is shared).
//
// The base is normally "corral" beside this process in its own cgroup C.
// A cgroup with processes of its own cannot hand a controller to its
// children (cgroup v2: enabling pids there makes C a thread root, whose
// children can hold no processes), so this process first moves into a
// leaf of its own, C/daemon, and then enables pids in C. It does that only
// if it is the only process in C (a service's cgroup); otherwise, or where
// the base is elsewhere ($CORRAL_CGROUP_ROOT), it returns an error saying
// why and changes nothing.
func LimitTreePids(reserve int64) (int64, error) {
	base, err := cgroupBase() // fixed now: it stays C/corral after the move
	if err != nil {
		return 0, err
	}
	mnt, err := cgroup2Mount()
	if err != nil {
		return 0, err
	}
	self, err := selfCgroup()
	if err != nil {
		return 0, err
	}
	own := filepath.Join(mnt, self)
	var limit int64
	for dir := own; ; dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "pids.max"))
		if n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && perr == nil && (limit == 0 || n < limit) {
			limit = n
		}
		if dir == mnt || !strings.HasPrefix(dir, mnt) {
			break
		}
	}
	if limit == 0 {
		return 0, nil
	}
	want := limit - min(reserve, limit/2)
	if !hasController(base, "pids") || hasController(own, "") && cgroupHasProcs(own) {
		if filepath.Dir(base) != own {
			return 0, fmt.Errorf("pids limit for %s: it is not beside this process (in %s): %w", base, own, ErrUnsupported)
		}
		procs, err := cgroupProcsOnly(own)
		if err != nil {
			return 0, err
		}
		if len(procs) != 1 || procs[0] != os.Getpid() {
			return 0, fmt.Errorf("pids limit for %s: this process shares its cgroup %s with others", base, own)
		}
		leaf := filepath.Join(own, "daemon")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return 0, fmt.Errorf("pids limit for %s: %w", base, err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return 0, fmt.Errorf("pids limit for %s: move into %s: %w", base, leaf, err)
		}
		if !hasController(base, "pids") {
			if err := os.WriteFile(filepath.Join(own, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
				return 0, fmt.Errorf("pids limit for %s: enable pids in %s: %w", base, own, err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(base, "pids.max"), []byte(strconv.FormatInt(want, 10)), 0); err != nil {
		return 0, fmt.Errorf("pids limit for %s: %w", base, err)
	}
	return want, nil
}

// hasController reports whether dir's cgroup.controllers lists name (with
// name "", whether its subtree_control enables any controller).
func hasController(dir, name string) bool {
	file := "cgroup.controllers"
	if name == "" {
		file = "cgroup.subtree_control"
	}
	b, _ := os.ReadFile(filepath.Join(dir, file))
	if name == "" {
		return strings.TrimSpace(string(b)) != ""
	}
	return strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+name+" ")
}

// cgroupHasProcs reports whether dir itself (not below) has processes.
func cgroupHasProcs(dir string) bool {
	procs, err := cgroupProcsOnly(dir)
	return err == nil && len(procs) > 0
}

// cgroupProcsOnly lists the processes of dir itself.
func cgroupProcsOnly(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
