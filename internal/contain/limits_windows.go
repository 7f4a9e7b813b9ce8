package contain

import (
	"context"
	"fmt"
	"math"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Limits on Windows are the job object's own: MemoryMax is the job-wide
// commit limit (JOB_OBJECT_LIMIT_JOB_MEMORY: allocations past it fail, no
// process is killed), CPUs is a hard CPU rate cap, PidsMax the active
// process limit (processes, not threads as with pids.max). All are set in
// the job before the root is created, so they hold from its first
// instruction. MemoryHigh has no equivalent and is refused.

// The job object structures and messages golang.org/x/sys/windows does
// not define (winnt.h).
const (
	jobObjectCPURateControlEnable  = 0x1
	jobObjectCPURateControlHardCap = 0x4

	jobObjectMsgActiveProcessLimit  = 3
	jobObjectMsgNewProcess          = 6
	jobObjectMsgExitProcess         = 7
	jobObjectMsgAbnormalExitProcess = 8
	jobObjectMsgJobMemoryLimit      = 10

	// msgKilling is corral's own packet, posted to the port just before
	// TerminateJobObject. Wine reports no exit of the processes that
	// call ends ("don't report completion events for terminated
	// processes", as Windows is said to), so from that packet on exits
	// are not counted on; the peak was reached before it either way.
	msgKilling = 0x7fff0001
)

// jobCPURateControl is JOBOBJECT_CPU_RATE_CONTROL_INFORMATION with its
// union as CpuRate.
type jobCPURateControl struct {
	ControlFlags uint32
	CPURate      uint32
}

// jobAssociateCompletionPort is JOBOBJECT_ASSOCIATE_COMPLETION_PORT.
type jobAssociateCompletionPort struct {
	CompletionKey  uintptr
	CompletionPort windows.Handle
}

// jobAccounting is JOBOBJECT_BASIC_ACCOUNTING_INFORMATION (times in 100 ns
// units).
type jobAccounting struct {
	TotalUserTime, TotalKernelTime, ThisPeriodUser, ThisPeriodKernel int64
	PageFaults, TotalProcesses, ActiveProcesses, Terminated          uint32
}

func queryAccounting(job windows.Handle) (jobAccounting, error) {
	var info jobAccounting
	err := windows.QueryInformationJobObject(job, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil)
	return info, err
}

// setJobLimits writes l into the job, which has no process yet.
func setJobLimits(job windows.Handle, l Limits) error {
	if l.MemoryHigh > 0 {
		// A silent no-op would run the command without the throttling
		// asked for; corral refuses limits it cannot enforce.
		return fmt.Errorf("%w: MemoryHigh (--memory-high, cgroup memory.high) has no Windows equivalent: "+
			"a job object can cap memory (MemoryMax, --memory) but not throttle and reclaim above a threshold; "+
			"use --memory, or leave --memory-high out", ErrIsolation)
	}
	if !l.IsZero() && underWine() {
		// Measured under Wine 8: a 256 MiB commit under a 64 MiB limit
		// succeeds, five children start under a limit of three, and the
		// CPU rate cap is refused as an invalid parameter.
		return fmt.Errorf("%w: Wine's job objects do not enforce resource limits (they take memory and process "+
			"limits and ignore them, and have no CPU rate cap), and corral does not run a command unlimited "+
			"that asked for limits: run it on Windows, or without --memory, --cpus and --pids", ErrIsolation)
	}
	if l.MemoryMax > 0 || l.PidsMax > 0 {
		var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
		if l.MemoryMax > 0 {
			info.BasicLimitInformation.LimitFlags |= windows.JOB_OBJECT_LIMIT_JOB_MEMORY
			info.JobMemoryLimit = jobMemoryLimit(l.MemoryMax)
		}
		if l.PidsMax > 0 {
			info.BasicLimitInformation.LimitFlags |= windows.JOB_OBJECT_LIMIT_ACTIVE_PROCESS
			info.BasicLimitInformation.ActiveProcessLimit = uint32(min(int64(l.PidsMax), math.MaxUint32))
		}
		if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
			uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
			return fmt.Errorf("%w: set the job object's memory and process limits: %w", ErrIsolation, err)
		}
	}
	if l.CPUs > 0 {
		rate := jobCPURateControl{
			ControlFlags: jobObjectCPURateControlEnable | jobObjectCPURateControlHardCap,
			CPURate:      cpuRate(l.CPUs, int(windows.GetActiveProcessorCount(windows.ALL_PROCESSOR_GROUPS))),
		}
		if _, err := windows.SetInformationJobObject(job, windows.JobObjectCpuRateControlInformation,
			uintptr(unsafe.Pointer(&rate)), uint32(unsafe.Sizeof(rate))); err != nil {
			return fmt.Errorf("%w: set the job object's CPU rate cap (CPUs %g): %w", ErrIsolation, l.CPUs, err)
		}
	}
	return nil
}

// jobMemoryLimit is n bytes as a job memory limit, a SIZE_T: a limit past
// what that can hold (5 GiB on 32-bit Windows, say) is the most there is,
// not n wrapped around to a small number.
func jobMemoryLimit(n int64) uintptr {
	return uintptr(min(uint64(n), uint64(^uintptr(0))))
}

// cpuRate is the hard cap for cpus CPUs out of n, in the job object's
// unit: cycles per 10000 of the whole machine's (1 at least; 10000, all of
// them, at most).
func cpuRate(cpus float64, n int) uint32 {
	n = max(n, 1)
	r := math.Round(cpus / float64(n) * 10000)
	return uint32(min(max(r, 1), 10000))
}

// jobEvents is what the job's completion port told about one job: how
// many of its processes were alive at most, and whether a limit refused
// something. Windows delivers these messages in order but does not
// promise to deliver each one, so Usage trusts the counts only where they
// agree with the job's own accounting.
type jobEvents struct {
	mu                        sync.Mutex
	started, exited, active   int64
	peak                      int64
	memoryLimit, processLimit bool
	// killed: the msgKilling packet was read; startedAfterKill counts
	// the processes that joined the job after it.
	killed           bool
	startedAfterKill int64
	changed          chan struct{} // a message was counted (buffered 1)
	key              uintptr
}

// The completion port all jobs of this process report to, with one
// goroutine that reads it for the life of the process (as os/signal's
// loop does): one blocked thread for all trees, not one for each. Keys
// route each message to its job's jobEvents; a key is never reused, so a
// message about a job already closed (a released process exiting) finds
// no one and is dropped.
var (
	portOnce sync.Once
	port     windows.Handle
	portErr  error
	portMu   sync.Mutex
	portJobs = map[uintptr]*jobEvents{}
	portKey  uintptr
)

func jobPort() (windows.Handle, error) {
	portOnce.Do(func() {
		port, portErr = windows.CreateIoCompletionPort(windows.InvalidHandle, 0, 0, 1)
		if portErr != nil {
			return
		}
		// Not the goroutine of whoever started the first tree: its
		// profiler labels (a test's leak marker) must not stick to it.
		go func() {
			pprof.SetGoroutineLabels(context.Background())
			readJobPort(port)
		}()
	})
	return port, portErr
}

func readJobPort(port windows.Handle) {
	for {
		var msg uint32
		var key, pid uintptr // a job message's "overlapped" is a process id
		err := windows.GetQueuedCompletionStatus(port, &msg, &key, (**windows.Overlapped)(unsafe.Pointer(&pid)), windows.INFINITE)
		if err != nil {
			if pid == 0 && key == 0 {
				time.Sleep(10 * time.Millisecond) // no packet: do not spin
			}
			continue
		}
		portMu.Lock()
		ev := portJobs[key]
		portMu.Unlock()
		if ev != nil {
			ev.note(msg)
		}
	}
}

func (ev *jobEvents) note(msg uint32) {
	ev.mu.Lock()
	switch msg {
	case jobObjectMsgNewProcess:
		if ev.killed {
			ev.startedAfterKill++
		}
		ev.started++
		ev.active++
		ev.peak = max(ev.peak, ev.active)
	case jobObjectMsgExitProcess, jobObjectMsgAbnormalExitProcess:
		ev.exited++
		ev.active--
	case jobObjectMsgJobMemoryLimit:
		ev.memoryLimit = true
	case jobObjectMsgActiveProcessLimit:
		ev.processLimit = true
	case msgKilling:
		ev.killed = true
	}
	ev.mu.Unlock()
	select {
	case ev.changed <- struct{}{}:
	default:
	}
}

// watchJob associates job with the process's completion port; call it
// before any process is in the job, and unwatch once the job is closed.
func watchJob(job windows.Handle) (*jobEvents, error) {
	p, err := jobPort()
	if err != nil {
		return nil, fmt.Errorf("job completion port: %w", err)
	}
	portMu.Lock()
	portKey++
	ev := &jobEvents{key: portKey, changed: make(chan struct{}, 1)}
	portJobs[ev.key] = ev
	portMu.Unlock()
	assoc := jobAssociateCompletionPort{CompletionKey: ev.key, CompletionPort: p}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectAssociateCompletionPortInformation,
		uintptr(unsafe.Pointer(&assoc)), uint32(unsafe.Sizeof(assoc))); err != nil {
		ev.unwatch()
		return nil, fmt.Errorf("associate the job with a completion port: %w", err)
	}
	return ev, nil
}

// killing marks the point in the job's messages where TerminateJobObject
// is about to be called.
func (ev *jobEvents) killing() {
	windows.PostQueuedCompletionStatus(port, msgKilling, ev.key, nil)
}

func (ev *jobEvents) unwatch() {
	portMu.Lock()
	delete(portJobs, ev.key)
	portMu.Unlock()
}

// peakOf returns the most processes of the job alive at once, once the
// messages about all the processes the job has had are read, waiting up
// to bound for them (count gives the job's own accounting: processes it
// has had, and has now, which are released ones if any). ok is false if
// they never add up: every process started must have been reported, and
// every one that is gone exited, or, if the job was killed, none may have
// started after that (the processes the kill ended are not reported; the
// peak was reached before it). why says what did not add up.
func (ev *jobEvents) peakOf(count func() (total, active int64, err error), bound time.Duration) (peak int64, ok bool, why string) {
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for {
		total, active, err := count()
		if err != nil {
			return 0, false, "job accounting: " + err.Error()
		}
		ev.mu.Lock()
		peak, started, exited := ev.peak, ev.started, ev.exited
		killed, late := ev.killed, ev.startedAfterKill
		ev.mu.Unlock()
		switch {
		case started == total && killed && late == 0:
			return peak, true, ""
		case started == total && !killed && exited == total-active:
			return peak, true, ""
		case started == total && killed && late > 0:
			return 0, false, fmt.Sprintf("%d processes joined the job while it was being killed", late)
		}
		select {
		case <-ev.changed:
		case <-time.After(10 * time.Millisecond): // a released process may exit meanwhile
		case <-deadline.C:
			return 0, false, fmt.Sprintf("the job's notifications (%d processes started, %d exited) "+
				"disagree with its accounting (%d processes, %d running): some were not delivered",
				started, exited, total, active)
		}
	}
}

// eventsBound is how long Usage waits for the port's messages about a job
// that is already empty to be read. The system queues them as each
// process leaves the job, before the job counts it gone, so only the
// reading goroutine can lag, by microseconds; a job whose messages never
// add up (one killed by another process's TerminateJobObject, which
// reports no exits) costs this once, and has no pids_peak.
const eventsBound = 250 * time.Millisecond

// Usage reads what the tree used from its job: call it once the tree is
// empty (or what is left of it released: their use so far counts), before
// Close closes the job.
func (t *jobTree) Usage() Usage {
	var u Usage
	var why []string
	acct, aerr := queryAccounting(t.job)
	wine := underWine()
	switch {
	case aerr != nil:
		why = append(why, "job accounting: "+aerr.Error())
	case wine && acct.TotalUserTime == 0 && acct.TotalKernelTime == 0:
		// Wine answers zeros it never measured; Windows counts in
		// clock ticks, so its zero for a short tree is a measurement.
		why = append(why, "cpu_user_ms, cpu_system_ms: Wine's job objects do not count CPU time")
	default:
		user, sys := acct.TotalUserTime/10, acct.TotalKernelTime/10 // 100 ns to us
		u.CPUUser, u.CPUSystem = &user, &sys
	}
	why = append(why, "cpu_throttled_ms: Windows job objects do not count throttled time")

	var ext windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	if err := windows.QueryInformationJobObject(t.job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&ext)), uint32(unsafe.Sizeof(ext)), nil); err != nil {
		why = append(why, "job memory peak: "+err.Error())
	} else if ext.PeakJobMemoryUsed == 0 {
		// No process runs without committing memory.
		r := "memory_peak_bytes: the job object reported no peak commit"
		if wine {
			r += " (Wine does not track it)"
		}
		why = append(why, r)
	} else {
		peak := int64(ext.PeakJobMemoryUsed)
		u.MemoryPeak = &peak
	}

	var memHit, procHit bool
	switch {
	case t.events == nil:
		why = append(why, "pids_peak: no job notifications")
	case aerr != nil:
		why = append(why, "pids_peak: no job accounting to check the notifications against")
	default:
		a, fresh := acct, true // read again only if the messages lag
		count := func() (int64, int64, error) {
			var err error
			if !fresh {
				a, err = queryAccounting(t.job)
			}
			fresh = false
			return int64(a.TotalProcesses), int64(a.ActiveProcesses), err
		}
		if peak, ok, reason := t.events.peakOf(count, eventsBound); ok {
			u.PidsPeak = &peak
		} else {
			why = append(why, "pids_peak: "+reason)
		}
	}
	if t.events != nil {
		t.events.mu.Lock()
		memHit, procHit = t.events.memoryLimit, t.events.processLimit
		t.events.mu.Unlock()
	}
	if procHit {
		why = append(why, "the job's active process limit refused at least one process")
	}
	oom := "oom_kills: Windows has no OOM killer (allocations past the job memory limit fail instead)"
	if memHit {
		oom += "; the job memory limit was reached and allocations failed"
	}
	why = append(why, oom)
	u.Missing = strings.Join(why, "; ")
	return u
}

var (
	wineOnce sync.Once
	isWine   bool
)

// underWine reports whether this process runs under Wine, whose job
// objects take limits without enforcing them and answer accounting with
// zeros (ntdll exports wine_get_version there, never on Windows).
func underWine() bool {
	wineOnce.Do(func() {
		isWine = windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
	})
	return isWine
}
