package contain

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// setLimits writes l into the live cgroup dir: memory.high, memory.max,
// cpu.max, pids.max, each only if l sets or removes it. A controller the
// cgroup lacks is first enabled in its parent's subtree_control if that
// parent can hand it down (as at a start).
func setLimits(dir string, l Limits) error {
	if err := validLive(l); err != nil {
		return err
	}
	// Only what is set needs its controller: a limit removed where its
	// controller is not there is no limit already.
	need := Limits{MemoryMax: max(l.MemoryMax, 0), MemoryHigh: max(l.MemoryHigh, 0), CPUs: max(l.CPUs, 0), PidsMax: max(l.PidsMax, 0)}
	if err := prepareControllers(filepath.Dir(dir), need.controllers()); err != nil {
		return err
	}
	write := func(file, v string) error {
		if err := writeSmall(filepath.Join(dir, file), v); err != nil {
			if errors.Is(err, unix.ENOENT) && v == "max" && unix.Access(dir, unix.F_OK) == nil {
				return nil // no controller, so no limit to remove
			}
			if errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("%w: set %s to %s: the tree's cgroup %s is gone", ErrGone, file, v, dir)
			}
			return fmt.Errorf("%w: set %s to %s in %s: %w", ErrIsolation, file, v, dir, err)
		}
		return nil
	}
	num := func(n int64) string {
		if n < 0 {
			return "max"
		}
		return strconv.FormatInt(n, 10)
	}
	if l.MemoryHigh != 0 {
		if err := write("memory.high", num(l.MemoryHigh)); err != nil {
			return err
		}
	}
	if l.MemoryMax != 0 {
		if err := write("memory.max", num(l.MemoryMax)); err != nil {
			return err
		}
	}
	switch {
	case l.CPUs > 0:
		if err := write("cpu.max", cpuMax(l.CPUs)); err != nil {
			return err
		}
	case l.CPUs < 0:
		if err := write("cpu.max", "max"); err != nil {
			return err
		}
	}
	if l.PidsMax != 0 {
		if err := write("pids.max", num(int64(l.PidsMax))); err != nil {
			return err
		}
	}
	return nil
}

// validLive refuses what no cgroup file takes: NaN or infinite CPUs.
func validLive(l Limits) error {
	if l.CPUs != l.CPUs || l.CPUs > 1e6 || l.CPUs < -1e6 {
		return fmt.Errorf("invalid CPU limit %v", l.CPUs)
	}
	return nil
}

// checkControllers is CheckLimits's part after the isolation: the
// controllers l needs are (or can be) enabled where trees are made.
func checkControllers(iso Isolation, l Limits) error {
	if iso != Cgroup {
		return nil
	}
	base, err := cgroupBase()
	if err != nil {
		return err
	}
	return prepareControllers(base, l.controllers())
}

// liveUsage is readUsage for a cgroup still in use, with what it holds
// now (memory.current, pids.current).
func liveUsage(dir string) (Usage, error) {
	var buf [64]byte
	if err := unix.Access(dir, unix.F_OK); err != nil {
		return Usage{Missing: "the tree's cgroup is gone"}, fmt.Errorf("%w: cgroup %s: %w", ErrGone, dir, err)
	}
	u := readUsage(dir)
	if b, err := readSmall(filepath.Join(dir, "memory.current"), buf[:]); err == nil {
		u.MemoryCurrent = number(b)
	}
	if b, err := readSmall(filepath.Join(dir, "pids.current"), buf[:]); err == nil {
		u.PidsCurrent = number(b)
	}
	return u, nil
}

const (
	cpuStat = iota
	memEvents
	memPeak
	pidsPeak
)

var counterFiles = [4]string{"cpu.stat", "memory.events", "memory.peak", "pids.peak"}

func openCounter(dir string) (*Counter, Usage, error) {
	c := &Counter{fds: [4]int{-1, -1, -1, -1}}
	for i, name := range counterFiles {
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
			if i == cpuStat {
				c.closeLocked()
				if errors.Is(err, unix.ENOENT) {
					return nil, Usage{Missing: "the tree's cgroup is gone"}, fmt.Errorf("%w: cgroup %s: %w", ErrGone, dir, err)
				}
				return nil, Usage{Missing: "cpu.stat: " + err.Error()}, err
			}
		}
		c.fds[i] = fd
	}
	// Why what is missing is: as a run's accounting says it (once).
	c.missing = readUsage(dir).Missing
	return c, Usage{}, nil
}

// Read reads the counters: CPU times and OOM kills, and with peaks also
// memory.peak and pids.peak (with Missing for what is absent).
func (c *Counter) Read(peaks bool) (Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Usage{Missing: "the tree's cgroup is gone"}, ErrGone
	}
	var u Usage
	var buf [1024]byte
	read := func(i int) ([]byte, error) {
		for {
			n, err := unix.Pread(c.fds[i], buf[:], 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return nil, err
			}
			return buf[:n], nil
		}
	}
	b, err := read(cpuStat)
	if err != nil {
		// ENODEV: the cgroup was removed under us.
		return Usage{Missing: "the tree's cgroup is gone"}, fmt.Errorf("%w: cpu.stat: %w", ErrGone, err)
	}
	u.CPUUser, u.CPUSystem, u.CPUThrottled = statValue(b, "user_usec"), statValue(b, "system_usec"), statValue(b, "throttled_usec")
	if c.fds[memEvents] >= 0 {
		if b, err := read(memEvents); err == nil {
			u.OOMKills = statValue(b, "oom_kill")
		}
	}
	if !peaks {
		return u, nil
	}
	if c.fds[memPeak] >= 0 {
		if b, err := read(memPeak); err == nil {
			u.MemoryPeak = number(b)
		}
	}
	if c.fds[pidsPeak] >= 0 {
		if b, err := read(pidsPeak); err == nil {
			u.PidsPeak = number(b)
		}
	}
	u.Missing = c.missing
	return u, nil
}

// Close releases the descriptors.
func (c *Counter) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *Counter) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	for i, fd := range c.fds {
		if fd >= 0 {
			unix.Close(fd)
		}
		c.fds[i] = -1
	}
}

// noPeakReset is set once the kernel refused a reset of memory.peak: it
// is the kernel's, not the cgroup's, so later commands do not ask again.
var noPeakReset atomic.Bool

func resetPeak(dir string) (*Peak, error) {
	if noPeakReset.Load() {
		return nil, fmt.Errorf("memory.peak cannot be reset here (Linux 6.12 and later can): %w", ErrUnsupported)
	}
	fd, err := unix.Open(filepath.Join(dir, "memory.peak"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		noPeakReset.Store(true) // the file takes no writes: a kernel before 6.12
	}
	if err != nil {
		return nil, fmt.Errorf("memory.peak cannot be reset here (Linux 6.12 and later can): %w: %w", ErrUnsupported, err)
	}
	if _, err := unix.Write(fd, []byte("reset\n")); err != nil {
		unix.Close(fd)
		noPeakReset.Store(true)
		return nil, fmt.Errorf("memory.peak cannot be reset here: %w: %w", ErrUnsupported, err)
	}
	return &Peak{fd: fd}, nil
}

// Read is the tree's memory peak since the reset, in bytes.
func (p *Peak) Read() (int64, error) {
	var buf [32]byte
	n, err := unix.Pread(p.fd, buf[:], 0)
	if err != nil {
		return 0, err
	}
	v := number(buf[:n])
	if v == nil {
		return 0, fmt.Errorf("memory.peak: unreadable %q", buf[:n])
	}
	return *v, nil
}

// Close releases the Peak.
func (p *Peak) Close() { unix.Close(p.fd) }
