package contain

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral/internal/proc"
)

// The pgroup backend makes this process a child subreaper, so orphans of a
// tree come back to it instead of to init and can still be found and
// killed. Orphans that die must then be reaped here; the reaper below is
// the one place that does it, and it only reaps zombies it can attribute to
// a tree (by process group, or because a scan saw the process alive as a
// member) unless OwnAllChildren was called. A root is never reaped by it:
// its tree's owner does that.
var reaper struct {
	once sync.Once
	err  error
	// mu guards the fields that follow.
	mu    sync.Mutex
	all   bool           // every non-root child is ours to reap
	roots map[int]bool   // pids of live roots (reaped by their trees)
	pgids map[int]int    // process groups of live trees, counted
	seen  map[int]uint64 // pid -> start time of members seen alive
}

// OwnAllChildren declares that this process starts no children of its own
// outside corral, so the subreaper may reap every zombie child it finds.
// The corral command calls it; a library user that also uses os/exec must
// not.
func OwnAllChildren() {
	reaper.mu.Lock()
	reaper.all = true
	reaper.mu.Unlock()
}

func startReaper() error {
	reaper.once.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			reaper.err = fmt.Errorf("child subreaper: %w", err)
			return
		}
		reaper.roots = map[int]bool{}
		reaper.pgids = map[int]int{}
		reaper.seen = map[int]uint64{}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			for range ch {
				reapOrphans()
			}
		}()
	})
	return reaper.err
}

// reapOrphans reaps the zombie children of this process that belong to a
// tree and are not a root.
func reapOrphans() {
	kids, err := proc.Children(os.Getpid())
	if err != nil {
		return
	}
	for _, kid := range kids {
		st, err := proc.ReadStat(kid)
		if err != nil || !st.Zombie() {
			continue
		}
		reaper.mu.Lock()
		ours := !reaper.roots[kid] && (reaper.all || reaper.pgids[st.Pgid] > 0 || reaper.seen[kid] == st.StartTime)
		if ours {
			delete(reaper.seen, kid)
		}
		reaper.mu.Unlock()
		if ours {
			var ws syscall.WaitStatus
			syscall.Wait4(kid, &ws, syscall.WNOHANG, nil)
		}
	}
}

type pgroupTree struct {
	ident    Identity
	root     *root
	self     int
	released map[int]uint64
	closed   bool
	// termed holds the members sent SIGTERM, so that a later Terminate
	// signals only processes that appeared since.
	termed map[member]bool
	// groupTermed: Terminate sent the group SIGTERM (once: an empty
	// termed does not prove it did not), at groupTick if groupSent.
	groupTermed bool
	groupSent   bool
	groupTick   uint64
}

func startPgroup(spec *Spec) (Tree, error) {
	if err := startReaper(); err != nil {
		return nil, err
	}
	var t *pgroupTree
	register := func(id *Identity) {
		reaper.mu.Lock()
		reaper.roots[id.Pid] = true
		reaper.pgids[id.Pgid]++
		reaper.mu.Unlock()
	}
	r, ident, err := forkExec(spec, &syscall.SysProcAttr{}, Identity{Isolation: Pgroup}, true, register)
	if err != nil {
		if ident.Pid != 0 {
			unregister(ident)
		}
		return nil, err
	}
	t = &pgroupTree{ident: ident, root: r, self: os.Getpid(), released: map[int]uint64{}, termed: map[member]bool{}}
	return t, nil
}

func unregister(id Identity) {
	reaper.mu.Lock()
	delete(reaper.roots, id.Pid)
	if reaper.pgids[id.Pgid]--; reaper.pgids[id.Pgid] <= 0 {
		delete(reaper.pgids, id.Pgid)
	}
	reaper.mu.Unlock()
}

func (t *pgroupTree) rootExited() bool {
	select {
	case <-t.root.exited:
		return true
	default:
		return false
	}
}

// hasLiveOrphans reports whether this process has a live child that is not
// the root of a tree. Once a tree's root has exited, every live process of
// the tree is such a child or a descendant of one (orphans come back to
// the subreaper, setsid or not), so without one the tree is empty and no
// scan of the process table is needed.
//
// A child that dies hands its own children to us before it becomes a
// zombie, so a child seen dead may have brought a live one that an earlier
// read of the list missed: the list is read until two reads agree.
func hasLiveOrphans() bool {
	prev, err := proc.Children(os.Getpid())
	if err != nil {
		return true
	}
	for tries := 0; tries < 100; tries++ {
		for _, kid := range prev {
			reaper.mu.Lock()
			root := reaper.roots[kid]
			reaper.mu.Unlock()
			if root {
				continue
			}
			if st, err := proc.ReadStat(kid); err == nil && !st.Zombie() {
				return true
			}
		}
		next, err := proc.Children(os.Getpid())
		if err != nil {
			return true
		}
		if sameInts(prev, next) {
			return false
		}
		prev = next
	}
	return true
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[int]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		if seen[x]--; seen[x] < 0 {
			return false
		}
	}
	return true
}

func (t *pgroupTree) Identity() Identity      { return t.ident }
func (t *pgroupTree) Exited() <-chan struct{} { return t.root.exited }
func (t *pgroupTree) Status() Status          { return t.root.status }

// member is a process of the tree as one scan saw it.
type member struct {
	pid   int
	start uint64
}

func pidsOf(ms []member) []int {
	pids := make([]int, len(ms))
	for i, m := range ms {
		pids[i] = m.pid
	}
	return pids
}

// scan lists the live members of the tree and reaps zombie orphans of ours
// on the way.
func (t *pgroupTree) scan() ([]member, error) {
	if t.rootExited() && !hasLiveOrphans() {
		return nil, nil
	}
	out, err := scanMembers(t.ident, true, func(pid int, start uint64) bool {
		return pid == t.self || (t.released[pid] == start && start != 0)
	})
	if err != nil {
		return nil, err
	}
	reaper.mu.Lock()
	for _, m := range out {
		reaper.seen[m.pid] = m.start
	}
	reaper.mu.Unlock()
	reapOrphans()
	return out, nil
}

// scanMembers lists the live processes of the tree named by ident: those
// that started no earlier than its root and are the root itself (same pid
// and start time), are in its process group (only if useGroup: the caller
// has proved the group id is still the tree's), descend from a member, or
// carry the tree's marker. skip excludes processes (this one, released
// ones). Zombies are not members.
func scanMembers(ident Identity, useGroup bool, skip func(pid int, start uint64) bool) ([]member, error) {
	pids, err := proc.Pids()
	if err != nil {
		return nil, err
	}
	stats := make(map[int]proc.Stat, len(pids))
	for _, pid := range pids {
		if st, err := proc.ReadStat(pid); err == nil {
			stats[pid] = st
		}
	}
	memo := map[int]bool{}
	var isMember func(pid int, depth int) bool
	isMember = func(pid int, depth int) bool {
		if v, ok := memo[pid]; ok {
			return v
		}
		st, ok := stats[pid]
		v := false
		switch {
		case !ok || depth > 64 || st.StartTime < ident.StartTime || skip(pid, st.StartTime):
		case pid == ident.Pid && st.StartTime == ident.StartTime:
			v = true
		case useGroup && st.Pgid == ident.Pgid:
			v = true
		default:
			v = isMember(st.Ppid, depth+1)
			if !v && !st.Zombie() && ident.Marker != "" {
				v, _ = proc.HasEnv(pid, ident.Marker)
			}
		}
		memo[pid] = v
		return v
	}
	var out []member
	for pid, st := range stats {
		if !st.Zombie() && isMember(pid, 0) {
			out = append(out, member{pid, st.StartTime})
		}
	}
	return out, nil
}

// signalMembers signals each member through a pidfd, after checking that
// the pid still names the process the scan saw.
func signalMembers(ms []member, sig unix.Signal) error {
	var errs []error
	for _, m := range ms {
		start := m.start
		if err := signalVerified(m.pid, sig, func(pid int) bool {
			st, err := proc.ReadStat(pid)
			return err == nil && st.StartTime == start
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *pgroupTree) Members() ([]int, error) {
	ms, err := t.scan()
	return pidsOf(ms), err
}

// signalAll signals the whole group (safe: its leader, the root, is not
// reaped before Close) and then every member found by a scan, each through
// a pidfd checked against the start time the scan saw.
func (t *pgroupTree) signalAll(sig unix.Signal) (int, error) {
	var errs []error
	if !t.closed {
		if err := unix.Kill(-t.ident.Pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("signal group %d: %w", t.ident.Pgid, err))
		}
	}
	ms, err := t.scan()
	if err != nil {
		errs = append(errs, err)
	}
	if err := signalMembers(ms, sig); err != nil {
		errs = append(errs, err)
	}
	return len(ms), errors.Join(errs...)
}

// Terminate sends SIGTERM to the group (the first time) and to every
// member not sent one before.
func (t *pgroupTree) Terminate() error {
	var errs []error
	if !t.groupTermed && !t.closed {
		t.groupTermed = true
		t.groupTick = bootTicks()
		if err := unix.Kill(-t.ident.Pgid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("signal group %d: %w", t.ident.Pgid, err))
		} else {
			t.groupSent = true
		}
	}
	ms, err := t.scan()
	if err != nil {
		errs = append(errs, err)
	}
	var fresh []member
	for _, m := range ms {
		if !t.termed[m] {
			t.termed[m] = true
			// One SIGTERM each: those the group signal reached get
			// none of their own.
			if !t.groupSent || !gotGroupSignal(m.pid, t.ident.Pgid, t.groupTick) {
				fresh = append(fresh, m)
			}
		}
	}
	if err := signalMembers(fresh, unix.SIGTERM); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Kill sends SIGKILL in rounds until a scan finds no member: a process
// forked while a round was under way is caught by the next one.
func (t *pgroupTree) Kill() error {
	var err error
	for i := 0; i < 100; i++ {
		var n int
		n, err = t.signalAll(unix.SIGKILL)
		if n == 0 {
			return err
		}
	}
	return err
}

func (t *pgroupTree) WaitEmpty(timeout time.Duration) error {
	return pollEmpty(timeout, fmt.Sprintf("group %d", t.ident.Pgid), func() (int, error) {
		ms, err := t.scan()
		return len(ms), err
	})
}

func (t *pgroupTree) Release(pids []int) error {
	for _, pid := range pids {
		if st, err := proc.ReadStat(pid); err == nil {
			t.released[pid] = st.StartTime
		}
	}
	return nil
}

func (t *pgroupTree) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	t.root.reap(true)
	unregister(t.ident)
	return nil
}

func (t *pgroupTree) KillProcs(pids []int) error {
	ms, err := t.scan()
	if err != nil {
		return err
	}
	return killPicked(ms, pids)
}

// killPicked kills those of the scanned members whose pid is in pids.
func killPicked(ms []member, pids []int) error {
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	var pick []member
	for _, m := range ms {
		if want[m.pid] {
			pick = append(pick, m)
		}
	}
	return signalMembers(pick, unix.SIGKILL)
}
