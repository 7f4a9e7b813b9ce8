package contain

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// accountedControllers are the controllers corral enables for its trees
// where it can: in the subtree_control of its own base cgroup, and only
// there. Each gives the tree's cgroup the files its limits and accounting
// use.
var accountedControllers = []string{"memory", "cpu", "pids"}

// prepareControllers makes sure the controllers need lists are enabled in
// base's cgroup.subtree_control, enabling any of accountedControllers
// that base's parent hands down and that is not yet (best effort: a
// controller that cannot be enabled is only an error if needed). It costs
// one read once all are enabled.
func prepareControllers(base string, need []string) error {
	preparedMu.Lock()
	defer preparedMu.Unlock()
	if p, ok := prepared[base]; ok && allIn(need, p) {
		return nil
	}
	var buf [512]byte
	sub := filepath.Join(base, "cgroup.subtree_control")
	on, _ := readSmall(sub, buf[:])
	missing := false
	for _, c := range accountedControllers {
		if !hasWord(on, c) {
			missing = true
		}
	}
	if !missing {
		prepared[base] = accountedControllers
		return nil
	}
	avail, _ := readSmall(filepath.Join(base, "cgroup.controllers"), buf[:])
	avail = append([]byte(nil), avail...)
	var werr = map[string]error{}
	for _, c := range accountedControllers {
		if !hasWord(on, c) && hasWord(avail, c) {
			if err := writeSmall(sub, "+"+c); err != nil {
				werr[c] = err
			}
		}
	}
	on, _ = readSmall(sub, buf[:])
	// Remember what is on: the next start pays nothing unless it needs
	// more (a controller delegated since, say by LimitTreePids).
	var now []string
	for _, c := range accountedControllers {
		if hasWord(on, c) {
			now = append(now, c)
		}
	}
	prepared[base] = now
	for _, c := range need {
		if hasWord(on, c) {
			continue
		}
		if !hasWord(avail, c) {
			return fmt.Errorf("%w: the cgroup v2 %s controller is not delegated to %s (its cgroup.controllers: %q): "+
				"run corral in a cgroup that delegates it (a systemd unit with Delegate=yes or Delegate=%s, "+
				"or 'systemd-run --user --scope -p Delegate=yes corral ...'), or set %s to such a cgroup; "+
				"on a hybrid cgroup layout the controller is bound to cgroup v1 (boot with systemd.unified_cgroup_hierarchy=1)",
				ErrIsolation, c, base, strings.TrimSpace(string(avail)), c, CgroupRootEnv)
		}
		return fmt.Errorf("%w: cannot enable the cgroup v2 %s controller in %s: %w", ErrIsolation, c, sub, werr[c])
	}
	return nil
}

// prepared is, per base cgroup, the accounted controllers found enabled
// in its subtree_control by the last prepareControllers.
var (
	preparedMu sync.Mutex
	prepared   = map[string][]string{}
)

func allIn(need, have []string) bool {
	for _, n := range need {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// applyLimits writes l into the fresh cgroup dir, open as dirfd (before
// anything runs in it). Each file is opened relative to dirfd: a write of
// a limit is mostly the open of its file, and a path from the root walks
// every directory down to the tree's again (measured in the VM, where
// each limit's write cost about 1 ms of a 20 ms run; BenchmarkApplyLimits).
func applyLimits(dir string, dirfd int, l Limits) error {
	write := func(file, v string) error {
		if err := writeAt(dirfd, file, v); err != nil {
			return fmt.Errorf("%w: set %s to %s in %s: %w", ErrIsolation, file, v, dir, err)
		}
		return nil
	}
	// memory.high first: a memory.max below it is the one that counts.
	if l.MemoryHigh > 0 {
		if err := write("memory.high", strconv.FormatInt(l.MemoryHigh, 10)); err != nil {
			return err
		}
	}
	if l.MemoryMax > 0 {
		if err := write("memory.max", strconv.FormatInt(l.MemoryMax, 10)); err != nil {
			return err
		}
	}
	if l.CPUs > 0 {
		if err := write("cpu.max", cpuMax(l.CPUs)); err != nil {
			return err
		}
	}
	if l.PidsMax > 0 {
		if err := write("pids.max", strconv.Itoa(l.PidsMax)); err != nil {
			return err
		}
	}
	return nil
}

// cpuPeriod is the cpu.max period, in microseconds (the kernel's default).
const cpuPeriod = 100000

// cpuMax is cpu.max's "quota period" for cpus CPUs (the kernel's smallest
// quota is 1 ms).
func cpuMax(cpus float64) string {
	q := int64(math.Round(cpus * cpuPeriod))
	q = max(q, 1000)
	return strconv.FormatInt(q, 10) + " " + strconv.Itoa(cpuPeriod)
}

// Usage reads what the tree used from its cgroup: call it once the tree
// is empty, before Close removes the cgroup.
func (t *cgroupTree) Usage() Usage { return readUsage(t.dir) }

func readUsage(dir string) Usage {
	var u Usage
	var why []string
	var buf [1024]byte
	var on []byte // the parent's subtree_control, read once if needed
	var onBuf [256]byte
	notDelegated := func(c string) bool {
		if on == nil {
			b, err := readSmall(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control"), onBuf[:])
			if err != nil {
				return false
			}
			on = append(b, ' ') // not nil, even when empty
		}
		return !hasWord(on, c)
	}
	absent := func(c, file string) {
		if notDelegated(c) {
			why = append(why, "cgroup v2 "+c+" controller not delegated")
		} else {
			why = append(why, file+" not provided by this kernel")
		}
	}

	if b, err := readSmall(filepath.Join(dir, "cpu.stat"), buf[:]); err == nil {
		u.CPUUser = statValue(b, "user_usec")
		u.CPUSystem = statValue(b, "system_usec")
		if u.CPUThrottled = statValue(b, "throttled_usec"); u.CPUThrottled == nil {
			absent("cpu", "cpu.stat throttled_usec")
		}
	} else {
		why = append(why, "cpu.stat: "+err.Error())
	}
	if b, err := readSmall(filepath.Join(dir, "memory.peak"), buf[:]); err == nil {
		u.MemoryPeak = number(b)
		if b, err := readSmall(filepath.Join(dir, "memory.events"), buf[:]); err == nil {
			u.OOMKills = statValue(b, "oom_kill")
		}
	} else if errors.Is(err, unix.ENOENT) {
		absent("memory", "memory.peak")
	} else {
		why = append(why, "memory.peak: "+err.Error())
	}
	if b, err := readSmall(filepath.Join(dir, "pids.peak"), buf[:]); err == nil {
		u.PidsPeak = number(b)
	} else if errors.Is(err, unix.ENOENT) {
		absent("pids", "pids.peak")
	} else {
		why = append(why, "pids.peak: "+err.Error())
	}
	u.Missing = strings.Join(why, "; ")
	return u
}

// statValue finds "key N" in a flat-keyed cgroup file.
func statValue(b []byte, key string) *int64 {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			return number(line[len(key)+1:])
		}
	}
	return nil
}

func number(b []byte) *int64 {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// readSmall reads a small file into buf without the allocations of
// os.ReadFile: accounting is read on every run.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}

func writeSmall(path, v string) error { return writeAt(unix.AT_FDCWD, path, v) }

// writeAt writes v to the file name relative to the directory dirfd
// (unix.AT_FDCWD: name is a path).
func writeAt(dirfd int, name, v string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, werr := unix.Write(fd, []byte(v))
	cerr := unix.Close(fd)
	if werr != nil {
		return werr
	}
	return cerr
}

func hasWord(list []byte, w string) bool {
	for _, f := range bytes.Fields(list) {
		if string(f) == w {
			return true
		}
	}
	return false
}
