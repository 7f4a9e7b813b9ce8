package contain

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/proc"
)

func adopt(ident Identity) (Orphan, error) { return adoptWith(ident, nil) }

func adoptWith(ident Identity, procs []Proc) (Orphan, error) {
	boot, err := proc.BootID()
	if err != nil {
		return nil, err
	}
	if ident.BootID != boot {
		return nil, fmt.Errorf("recorded under boot %s: %w", ident.BootID, ErrGone)
	}
	if ident.Marker != "" && !validMarker(ident.Marker) {
		return nil, fmt.Errorf("tree of root %d: recorded marker %q is not one corral makes (%s=<tree id>): %w; nothing was signalled",
			ident.Pid, ident.Marker, MarkerName, ErrNotOurs)
	}
	switch ident.Isolation {
	case Cgroup:
		if err := checkTreeCgroup(ident.Cgroup); err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(ident.Cgroup, "cgroup.procs")); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cgroup %s: %w", ident.Cgroup, ErrGone)
		}
		if err := rootInCgroup(ident); err != nil {
			return nil, err
		}
		return &cgroupOrphan{dir: ident.Cgroup}, nil
	case Pgroup:
		if ident.Pid <= 0 || ident.Pgid <= 0 || ident.StartTime == 0 {
			return nil, fmt.Errorf("incomplete identity %+v", ident)
		}
		proved, err := rootHasMarker(ident)
		if err != nil {
			return nil, err
		}
		o := &pgroupOrphan{ident: ident, recorded: map[int]uint64{}, rootProved: proved}
		for _, p := range procs {
			if p.Pid > 0 && p.StartTime >= ident.StartTime {
				o.recorded[p.Pid] = p.StartTime
			}
		}
		return o, nil
	}
	return nil, fmt.Errorf("isolation %q: %w", ident.Isolation, ErrUnsupported)
}

// validMarker reports whether kv is a marker corral makes:
// MarkerName=<tree id>, the id made only of letters, digits, '-' and '_'.
func validMarker(kv string) bool {
	id, ok := strings.CutPrefix(kv, MarkerName+"=")
	if !ok || id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// liveRoot reports whether the recorded root is running: its pid names a
// process that started at the recorded time and is not a zombie.
func liveRoot(ident Identity) bool {
	st, err := proc.ReadStat(ident.Pid)
	return err == nil && st.StartTime == ident.StartTime && !st.Zombie()
}

// rootInCgroup checks that a running recorded root of a cgroup tree is in
// the recorded cgroup (or below it): corral clones every root straight
// into the tree's cgroup, so a root outside it is not the tree's root but
// some other process whose pid, start time and boot a record names. A
// root that is gone, or a zombie, proves nothing and needs no proof: a
// cgroup tree signals only the cgroup's members.
func rootInCgroup(ident Identity) error {
	if ident.Pid <= 0 || !liveRoot(ident) {
		return nil
	}
	in, err := procCgroup(ident.Pid)
	if err == nil && within(in, ident.Cgroup) {
		return nil
	}
	if !liveRoot(ident) {
		return nil // it exited meanwhile (its cgroup file went with it)
	}
	if err != nil {
		return fmt.Errorf("root %d: cannot read its cgroup to prove it is the tree's: %w: %w; nothing was signalled", ident.Pid, err, ErrNotOurs)
	}
	return fmt.Errorf("root %d is in cgroup %s, not in the recorded %s: %w; nothing was signalled (a forged, swapped or corrupted record?)",
		ident.Pid, in, ident.Cgroup, ErrNotOurs)
}

// procCgroup is the cgroup directory (under the cgroup2 mount) that pid is in.
func procCgroup(pid int) (string, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mnt, p), nil
		}
	}
	return "", fmt.Errorf("process %d is in no cgroup v2", pid)
}

// rootHasMarker checks that a running recorded root of a pgroup tree
// carries the tree's marker in its environment, as every root corral
// starts does: pid, start time and boot prove only which process a record
// names, not that corral started it. It reports whether the root was
// proved so (false, with no error, when it is gone or a zombie, whose
// environment cannot be read: then its group does not count as the tree's
// either), and ErrNotOurs for a running root without the marker. A root
// that cleared its environment in an exec of its own (env -i CMD as the
// command itself) is refused so too: nothing else proves it ours.
func rootHasMarker(ident Identity) (bool, error) {
	if !liveRoot(ident) {
		return false, nil
	}
	if ident.Marker == "" {
		return false, fmt.Errorf("root %d: the record has no marker to prove it is a tree corral started: %w; nothing was signalled", ident.Pid, ErrNotOurs)
	}
	has, err := proc.HasEnv(ident.Pid, ident.Marker)
	if has {
		return true, nil
	}
	if !liveRoot(ident) {
		return false, nil // it exited meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("root %d: cannot read its environment to prove it is the tree's: %w: %w; nothing was signalled", ident.Pid, err, ErrNotOurs)
	}
	return false, fmt.Errorf("root %d does not carry the tree's marker %s: %w; nothing was signalled (a forged, swapped or corrupted record?)",
		ident.Pid, ident.Marker, ErrNotOurs)
}

// checkTreeCgroup accepts only a tree cgroup corral makes: a "t-" directory
// inside the cgroup2 hierarchy. A record can never point the reaper at any
// other cgroup.
func checkTreeCgroup(dir string) error {
	mnt, err := cgroup2Mount()
	if err != nil {
		return err
	}
	clean := filepath.Clean(dir)
	if clean != dir || !strings.HasPrefix(dir, mnt+"/") || !strings.HasPrefix(filepath.Base(dir), "t-") {
		return fmt.Errorf("%q is not a corral tree cgroup", dir)
	}
	return nil
}

type cgroupOrphan struct{ dir string }

func (o *cgroupOrphan) Members() ([]int, error) {
	pids, err := cgroupProcs(o.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return pids, err
}

func (o *cgroupOrphan) Kill() error {
	err := killCgroup(o.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (o *cgroupOrphan) WaitEmpty(d time.Duration) error { return waitCgroupEmpty(o.dir, d) }
func (o *cgroupOrphan) Remove() error                   { return removeCgroup(o.dir) }

type pgroupOrphan struct {
	ident Identity
	// recorded holds pid -> start time of the processes the owner
	// recorded as the tree's by adoption (see Adopted).
	recorded map[int]uint64
	// rootProved: the recorded root was running with the tree's marker
	// when the tree was re-found (see rootHasMarker).
	rootProved bool
}

// groupIsOurs reports whether the recorded group id still names the tree's
// group: only while the recorded root (same pid and start time, alive or a
// zombie) holds pid G. A new group G can only be made by a process whose
// pid is G, so once the root is gone and pid G is free, any process may be
// given G (a daemonizing program: fork, setsid, fork, exit) and make a
// group G of its own whose members all started after the root. "No process
// has pid G" therefore proves nothing, and neither does membership in G.
//
// The root must also have been proved the tree's (rootProved): otherwise a
// record naming any group leader would hand its whole group over.
func (o *pgroupOrphan) groupIsOurs() bool {
	if !o.rootProved {
		return false
	}
	st, err := proc.ReadStat(o.ident.Pgid)
	return err == nil && o.ident.Pgid == o.ident.Pid && st.StartTime == o.ident.StartTime
}

// scan finds the tree's members by the rules of scanMembers, with the
// processes the owner recorded as adopted (pid and start time) as verified
// members. The owner is gone, so no process is a child subreaper for the
// tree any more: its orphans went to init or to a subreaper above the dead
// owner. One that has neither the tree's marker nor a member as parent
// (setsid -f env -i CMD after its parent died) cannot be told from a
// stranger unless the owner recorded it before it died (record.Tracker
// looks every 100 ms); one it had no time to record is not found. Only a
// cgroup holds such a process for certain.
func (o *pgroupOrphan) scan() ([]member, error) {
	self := os.Getpid()
	return scanMembers(o.ident, proof{group: o.groupIsOurs, verified: o.recorded,
		skip: func(pid int, _ uint64) bool { return pid == self }})
}

func (o *pgroupOrphan) Members() ([]int, error) {
	ms, err := o.scan()
	return pidsOf(ms), err
}

// Kill freezes the tree (see freeze), then kills it in rounds until a
// scan finds no member.
func (o *pgroupOrphan) Kill() error {
	freeze(o.scan)
	var err error
	for i := 0; i < 100; i++ {
		var ms []member
		ms, err = o.scan()
		if err != nil || len(ms) == 0 {
			return err
		}
		err = signalMembers(ms, unix.SIGKILL)
	}
	return err
}

func (o *pgroupOrphan) WaitEmpty(d time.Duration) error {
	return pollEmpty(d, fmt.Sprintf("group %d", o.ident.Pgid), func() (int, error) {
		ms, err := o.scan()
		return len(ms), err
	})
}

func (o *pgroupOrphan) Remove() error { return nil }

func processAlive(pid int, start uint64) bool {
	st, err := proc.ReadStat(pid)
	if errors.Is(err, proc.ErrGone) {
		return false
	}
	if err != nil {
		return true
	}
	return !st.Zombie() && st.StartTime == start
}

func selfStart() uint64 {
	st, err := proc.ReadStat(os.Getpid())
	if err != nil {
		return 0
	}
	return st.StartTime
}

const canAdopt = true

func adoptLive(ident Identity) (Tree, error) {
	o, err := adopt(ident)
	if err != nil {
		return nil, err
	}
	r, err := watchRoot(ident.Pid, ident.StartTime)
	if err != nil {
		return nil, err
	}
	switch o := o.(type) {
	case *cgroupOrphan:
		return &adoptedCgroup{cgroupTree: &cgroupTree{ident: ident, dir: o.dir, root: r, termed: map[int]bool{}}}, nil
	case *pgroupOrphan:
		return &adoptedPgroup{pgroupOrphan: o, root: r, termed: map[member]bool{}}, nil
	}
	r.reap(false)
	return nil, fmt.Errorf("isolation %q: %w", ident.Isolation, ErrUnsupported)
}

// watchRoot opens a pidfd on a running process that is not our child,
// checks through it that it is the recorded one (a pidfd opened before the
// check keeps naming that process even if the pid is reused), and learns of
// its exit through awaitExit: no thread waits for it.
func watchRoot(pid int, start uint64) (*root, error) {
	if pid <= 0 || start == 0 {
		return nil, fmt.Errorf("root %d (start %d): %w", pid, start, ErrGone)
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("root %d: %w", pid, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	if !processAlive(pid, start) {
		unix.Close(fd)
		return nil, fmt.Errorf("root %d (start %d): %w", pid, start, ErrGone)
	}
	r := &root{pid: pid, pidfd: fd, exited: make(chan struct{}), status: Status{Code: -1}}
	go func() {
		r.awaitExit()
		close(r.exited)
	}()
	return r, nil
}

// adoptedCgroup is a live cgroup tree taken over from a dead owner. Its
// root was proved the tree's (inside the recorded cgroup) when it was
// adopted and is pinned by a pidfd since, so it stays one of the tree's
// even if it moves itself out of the cgroup afterwards (into a cgroup its
// owner may write): it is signalled through that pidfd besides the
// cgroup, listed while it runs, and waited for with the cgroup. Otherwise
// cgroup.kill would empty the cgroup, the root would live on unsignalled,
// and a Wait on the tree would wait for it for ever.
type adoptedCgroup struct {
	*cgroupTree
	rootTermed bool
}

// rootRunning reports whether the root has not exited.
func (t *adoptedCgroup) rootRunning() bool {
	select {
	case <-t.root.exited:
		return false
	default:
		return true
	}
}

// signalRoot signals the root through its pidfd while it runs.
func (t *adoptedCgroup) signalRoot(sig unix.Signal) error {
	if !t.rootRunning() {
		return nil
	}
	if err := unix.PidfdSendSignal(t.root.pidfd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal root %d: %w", t.root.pid, err)
	}
	return nil
}

func (t *adoptedCgroup) Members() ([]int, error) {
	pids, err := t.cgroupTree.Members()
	if err != nil || !t.rootRunning() {
		return pids, err
	}
	for _, p := range pids {
		if p == t.root.pid {
			return pids, nil
		}
	}
	return append(pids, t.root.pid), nil
}

func (t *adoptedCgroup) Terminate() error {
	err := t.cgroupTree.Terminate()
	if !t.rootTermed && !t.termed[t.root.pid] {
		t.rootTermed = true
		err = errors.Join(err, t.signalRoot(unix.SIGTERM))
	}
	return err
}

func (t *adoptedCgroup) Kill() error {
	return errors.Join(t.cgroupTree.Kill(), t.signalRoot(unix.SIGKILL))
}

func (t *adoptedCgroup) WaitEmpty(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := t.cgroupTree.WaitEmpty(timeout); err != nil {
		return err
	}
	select {
	case <-t.root.exited:
		return nil
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("root %d, outside the tree's cgroup, still runs: %w", t.root.pid, os.ErrDeadlineExceeded)
	}
}

func (t *adoptedCgroup) KillProcs(pids []int) error {
	err := t.cgroupTree.KillProcs(pids)
	for _, p := range pids {
		if p == t.root.pid {
			err = errors.Join(err, t.signalRoot(unix.SIGKILL))
		}
	}
	return err
}

// adoptedPgroup is a live process-group tree taken over from a dead owner.
// Its root is not our child, so the group id is never signalled (it could
// be reused once the root is reaped elsewhere): every member is found by a
// scan and signalled through a pidfd checked against its start time.
type adoptedPgroup struct {
	*pgroupOrphan
	root   *root
	termed map[member]bool
}

func (t *adoptedPgroup) Identity() Identity      { return t.ident }
func (t *adoptedPgroup) Exited() <-chan struct{} { return t.root.exited }
func (t *adoptedPgroup) Status() Status          { return t.root.status }

func (t *adoptedPgroup) Terminate() error {
	ms, err := t.scan()
	if err != nil {
		return err
	}
	var fresh []member
	for _, m := range ms {
		if !t.termed[m] {
			t.termed[m] = true
			fresh = append(fresh, m)
		}
	}
	return signalMembers(fresh, unix.SIGTERM)
}

func (t *adoptedPgroup) KillProcs(pids []int) error {
	ms, err := t.scan()
	if err != nil {
		return err
	}
	return killPicked(ms, pids)
}

func (t *adoptedPgroup) Release([]int) error { return ErrUnsupported }

func (t *adoptedPgroup) Close() error {
	t.root.reap(false)
	return nil
}
