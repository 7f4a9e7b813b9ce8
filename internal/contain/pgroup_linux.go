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
	mu       sync.Mutex
	all      bool           // every non-root child is ours to reap
	roots    map[int]bool   // pids of live roots (reaped by their trees)
	starting int            // trees between fork and registering their root
	pgids    map[int]int    // process groups of live trees, counted
	seen     map[int]uint64 // pid -> start time of members seen alive
	// released holds pid -> start time of processes a tree released:
	// no tree of this process claims them again.
	released map[int]uint64
}

// OwnAllChildren declares that this process starts no children of its own
// outside corral, so the subreaper may reap every zombie child it finds,
// and, while it runs a single pgroup tree, take every child other than that
// tree's root as an orphan of the tree (see pgroupTree.adopter). The corral
// command calls it; a library user that also uses os/exec must not.
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
		reaper.released = map[int]uint64{}
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
		// While a tree is starting, an unknown child may be its root
		// (not yet registered), which only its tree may reap.
		all := reaper.all && reaper.starting == 0
		ours := !reaper.roots[kid] && (all || reaper.pgids[st.Pgid] > 0 || reaper.seen[kid] == st.StartTime)
		if ours {
			delete(reaper.seen, kid)
			delete(reaper.released, kid)
		}
		reaper.mu.Unlock()
		if ours {
			var ws syscall.WaitStatus
			syscall.Wait4(kid, &ws, syscall.WNOHANG, nil)
		}
	}
}

type pgroupTree struct {
	ident  Identity
	root   *root
	self   int
	closed bool
	// termed holds the members sent SIGTERM, so that a later Terminate
	// signals only processes that appeared since.
	termed map[member]bool
	// groupTermed: Terminate sent the group SIGTERM (once: an empty
	// termed does not prove it did not), at groupTick if groupSent.
	groupTermed bool
	groupSent   bool
	groupTick   uint64
	// sigGroup*: the same for the first signal of a StopWith with
	// another signal than SIGTERM (terminateWith).
	sigGroupDone, sigGroupSent bool
	sigGroupTick               uint64
}

func startPgroup(spec *Spec) (Tree, error) {
	if err := startReaper(); err != nil {
		return nil, err
	}
	var t *pgroupTree
	// From the fork to register, the new root is a child of ours that no
	// tree knows as a root: starting keeps other trees from taking it for
	// an orphan meanwhile (see soleTree).
	reaper.mu.Lock()
	reaper.starting++
	reaper.mu.Unlock()
	register := func(id *Identity) {
		reaper.mu.Lock()
		reaper.roots[id.Pid] = true
		reaper.pgids[id.Pgid]++
		reaper.starting--
		reaper.mu.Unlock()
	}
	r, ident, err := forkExec(spec, &syscall.SysProcAttr{}, Identity{Isolation: Pgroup}, true, register)
	if err != nil {
		if ident.Pid != 0 {
			unregister(ident)
		} else {
			reaper.mu.Lock()
			reaper.starting--
			reaper.mu.Unlock()
		}
		return nil, err
	}
	t = &pgroupTree{ident: ident, root: r, self: os.Getpid(), termed: map[member]bool{}}
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
	var group func() bool
	if !t.closed {
		// The root is our unreaped child (a zombie once it exits) until
		// Close: no other process can have pid G, so no new group G.
		group = func() bool { return true }
	}
	out, err := scanMembers(t.ident, proof{group: group, adopter: t.adopter, skip: t.skip})
	if err != nil {
		return nil, err
	}
	reaper.mu.Lock()
	for _, m := range out {
		reaper.seen[m.pid] = m.start
	}
	if len(reaper.seen) > pruneAt {
		prune(reaper.seen)
	}
	reaper.mu.Unlock()
	reapOrphans()
	return out, nil
}

// skip excludes this process and every process released by a tree of
// this process (not only this tree's: a released process that comes back
// to us as an orphan must not be claimed by a later tree).
func (t *pgroupTree) skip(pid int, start uint64) bool {
	if pid == t.self {
		return true
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	rs, ok := reaper.released[pid]
	return ok && rs == start && start != 0
}

// adopter returns the pid whose children are all this tree's, or 0.
//
// This process is a child subreaper: a process of the tree whose parent
// dies comes back to it, whatever it did to leave the group and clear its
// environment (setsid -f env -i CMD). When this process starts no children
// of its own outside corral (OwnAllChildren) and this tree is the only
// live tree it runs, every child of it other than the root is such an
// orphan, so it is the tree's. A corral run is that case: its only child
// is the tree's root.
//
// A process running several trees at once (the daemon: sessions and
// oneshots share one subreaper) cannot tell which tree an orphan with no
// marker and no group came from: it claims it for no tree while another
// tree is live, and for the remaining tree once that is the only one. Such
// an orphan is still never a stranger (only our own descendants are
// reparented to us), and one that started before a tree's root is never
// that tree's.
func (t *pgroupTree) adopter() int {
	if soleTree(t.ident.Pid) {
		return t.self
	}
	return 0
}

// soleTree reports whether every child of this process other than root is
// an orphan of the tree whose root it is: this process starts no children
// outside corral, runs no other live tree and is starting none. A caller
// that lists children asks before and after the listing: a tree that
// started in between fails the second answer.
func soleTree(root int) bool {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	return reaper.all && reaper.starting == 0 && len(reaper.roots) == 1 && reaper.roots[root]
}

// adopted lists the live children of this process that are the tree
// ident's by adoption alone (see Adopted): while pgroupTree.adopter names
// this process, every child other than the root that started after it and
// was not released.
func adopted(ident Identity) []Proc {
	self := os.Getpid()
	if !soleTree(ident.Pid) {
		return nil
	}
	kids, err := proc.Children(self)
	if err != nil || !soleTree(ident.Pid) {
		return nil
	}
	var out []Proc
	for _, kid := range kids {
		st, err := proc.ReadStat(kid)
		if err != nil || st.Zombie() || kid == ident.Pid || st.StartTime < ident.StartTime || st.Ppid != self {
			continue
		}
		reaper.mu.Lock()
		rs, released := reaper.released[kid]
		reaper.mu.Unlock()
		if released && rs == st.StartTime {
			continue
		}
		out = append(out, Proc{Pid: kid, StartTime: st.StartTime})
	}
	if !soleTree(ident.Pid) {
		return nil
	}
	return out
}

// proof says what, beyond the recorded root itself and the tree's marker,
// proves a process to be the tree's in scanMembers.
type proof struct {
	// group, if set, reports whether the recorded group id is still the
	// tree's: only while the recorded root holds pid G (alive or an
	// unreaped zombie) can no other process make a new group G. It is
	// asked before and after the process table is read, and membership in
	// the group counts only if both answers are yes.
	group func() bool
	// adopter, if set, names a process whose every child is the tree's
	// (see pgroupTree.adopter), or 0. It is asked before and after the
	// process table is read, and counts only if both answers agree.
	adopter func() int
	// verified holds pid -> start time of processes known to be the
	// tree's (recorded by its owner as adopted).
	verified map[int]uint64
	// skip excludes processes (this one, released ones).
	skip func(pid int, start uint64) bool
}

// scanMembers lists the live processes of the tree named by ident. A
// process is the tree's only if it started no earlier than the tree's root
// and is not skipped, and:
//   - it is the root itself (same pid and start time), or
//   - it is in the root's process group, while p.group proves that group
//     is still the tree's, or
//   - it is a child of p.adopter, or
//   - it is in p.verified with the same start time, or
//   - its parent is a member and started no later than it did (a parent
//     that started later is a reused pid, not its parent), or
//   - it carries the tree's marker.
//
// Group membership alone is never proof once the root is gone: a new
// process with the root's pid can make a new group with the same id.
// Zombies are not members.
func scanMembers(ident Identity, p proof) ([]member, error) {
	useGroup := p.group != nil && p.group()
	adopter := 0
	if p.adopter != nil {
		adopter = p.adopter()
	}
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
	useGroup = useGroup && p.group()
	if adopter != 0 && p.adopter() != adopter {
		adopter = 0
	}
	const (
		unknown = iota
		visiting
		yes
		no
	)
	state := map[int]int{}
	var isMember func(pid int) bool
	isMember = func(pid int) bool {
		switch state[pid] {
		case yes:
			return true
		case no, visiting: // visiting: a cycle of reused pids
			return false
		}
		state[pid] = visiting
		st, ok := stats[pid]
		v := false
		switch {
		case !ok || st.StartTime < ident.StartTime || (p.skip != nil && p.skip(pid, st.StartTime)):
		case pid == ident.Pid && st.StartTime == ident.StartTime:
			v = true
		case useGroup && st.Pgid == ident.Pgid:
			v = true
		case adopter != 0 && st.Ppid == adopter:
			v = true
		case p.verified[pid] == st.StartTime && st.StartTime != 0:
			v = true
		default:
			if ps, ok := stats[st.Ppid]; ok && ps.StartTime <= st.StartTime {
				v = isMember(st.Ppid)
			}
			if !v && !st.Zombie() && ident.Marker != "" {
				v, _ = proc.HasEnv(pid, ident.Marker)
			}
		}
		state[pid] = no
		if v {
			state[pid] = yes
		}
		return v
	}
	var out []member
	for pid, st := range stats {
		if !st.Zombie() && isMember(pid) {
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
			if !t.groupSent || !m.gotGroupSignal(t.ident.Pgid, t.groupTick) {
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
// forked while a round was under way is caught by the next one. A process
// that is not the sole tree's adopter (see pgroupTree.adopter) freezes the
// tree first (see freeze): an orphan of a parent killed mid-fork would
// come back to it and be claimed by no tree. The sole tree's adopter
// claims such an orphan in the next round, and is spared the freeze.
func (t *pgroupTree) Kill() error {
	if t.adopter() == 0 {
		if !t.closed {
			unix.Kill(-t.ident.Pgid, unix.SIGSTOP)
		}
		freeze(t.scan)
	}
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
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if len(reaper.released) > pruneAt {
		prune(reaper.released)
	}
	for _, pid := range pids {
		if st, err := proc.ReadStat(pid); err == nil {
			reaper.released[pid] = st.StartTime
		}
	}
	return nil
}

// pruneAt bounds the reaper's maps of processes: past it, entries for
// processes that are gone are dropped (members and released processes
// that are not our children are reaped elsewhere, so the SIGCHLD path
// never removes them).
const pruneAt = 1024

// prune drops the entries of m whose process is gone or whose pid now
// names another process. Call with reaper.mu held.
func prune(m map[int]uint64) {
	for pid, start := range m {
		if st, err := proc.ReadStat(pid); err != nil || st.StartTime != start {
			delete(m, pid)
		}
	}
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

// freeze stops every member that scan finds (SIGSTOP, through a pidfd), in
// rounds, until a scan made after the members of the last round were seen
// stopped finds no new one. A stopped process cannot fork, and it stays
// alive as the parent that proves its children to be the tree's: killed
// while it was forking, a parent could leave a child with neither the
// tree's marker nor the group (setsid env -i) orphaned, to init once the
// owner is gone, and nothing would prove that child the tree's any more.
// SIGKILL ends stopped processes as any other. freeze gives up after 100
// rounds, and does not wait more than freezeWait per round for members to
// stop (a process in the kernel, D state, stops only when it leaves it):
// what it could not stop is left to the kill rounds.
func freeze(scan func() ([]member, error)) {
	stopped := map[member]bool{}
	for round := 0; round < 100; round++ {
		ms, err := scan()
		if err != nil {
			return
		}
		var fresh []member
		for _, m := range ms {
			if !stopped[m] {
				stopped[m] = true
				fresh = append(fresh, m)
			}
		}
		if len(fresh) == 0 {
			return
		}
		signalMembers(fresh, unix.SIGSTOP)
		awaitStopped(fresh, freezeWait)
	}
}

// freezeWait bounds how long freeze waits in one round for members to stop.
const freezeWait = 100 * time.Millisecond

// awaitStopped waits up to d for each of ms to be stopped, gone, or a
// zombie. A signal is delivered when its target next runs, so a process
// sent SIGSTOP in the middle of a fork finishes the fork first.
func awaitStopped(ms []member, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, m := range ms {
		for {
			st, err := proc.ReadStat(m.pid)
			if err != nil || st.StartTime != m.start || st.State == 'T' || st.State == 't' || st.Zombie() {
				break
			}
			if time.Now().After(deadline) {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
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
