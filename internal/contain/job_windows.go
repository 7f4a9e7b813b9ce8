package contain

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

var (
	kernel32           = windows.NewLazySystemDLL("kernel32.dll")
	procOpenJobObjectW = kernel32.NewProc("OpenJobObjectW")
	procIsProcessInJob = kernel32.NewProc("IsProcessInJob")

	procNtResumeProcess = windows.NewLazySystemDLL("ntdll.dll").NewProc("NtResumeProcess")
)

func best() Isolation { return Job }

func start(iso Isolation, spec *Spec) (Tree, error) {
	if iso != Auto && iso != Job {
		return nil, fmt.Errorf("isolation %q: %w", iso, ErrUnsupported)
	}
	if spec.Foreground {
		return nil, fmt.Errorf("foreground terminal: %w", ErrUnsupported)
	}
	if spec.Setsid {
		return nil, fmt.Errorf("a new session (Setsid): %w", ErrUnsupported)
	}
	env, err := windowsEnv(append(spec.Env[:len(spec.Env):len(spec.Env)], spec.Marker))
	if err != nil {
		return nil, err
	}
	name := `Local\corral-` + spec.Marker[strings.IndexByte(spec.Marker, '=')+1:]
	uname, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	job, err := windows.CreateJobObject(nil, uname)
	if err != nil {
		return nil, fmt.Errorf("job object: %w", err)
	}
	// No limit flags but the resource limits asked for: breakaway is not
	// allowed, and closing the last handle does not kill the job
	// (KILL_ON_JOB_CLOSE would take a successful command's released
	// children with it). The limits and the completion port are in the
	// job before the root exists, so they hold from its first instruction.
	if err := setJobLimits(job, spec.Limits); err != nil {
		windows.CloseHandle(job)
		return nil, err
	}
	events, err := watchJob(job)
	if err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("%w: %w", ErrIsolation, err)
	}
	fds := make([]uintptr, len(spec.Files))
	for i, f := range spec.Files {
		fds[i] = f.Fd()
	}
	// Created suspended: the child cannot run, let alone fork, before it
	// is in the job.
	pid, h, err := syscall.StartProcess(spec.Path, spec.Argv, &syscall.ProcAttr{
		Dir: spec.Dir, Env: env, Files: fds,
		Sys: &syscall.SysProcAttr{CreationFlags: windows.CREATE_SUSPENDED | windows.CREATE_NEW_PROCESS_GROUP},
	})
	if err != nil {
		windows.CloseHandle(job)
		events.unwatch()
		return nil, &os.PathError{Op: "CreateProcess", Path: spec.Path, Err: err}
	}
	proc := windows.Handle(h)
	fail := func(err error) (Tree, error) {
		windows.TerminateProcess(proc, 1)
		windows.WaitForSingleObject(proc, windows.INFINITE)
		windows.CloseHandle(proc)
		windows.CloseHandle(job)
		events.unwatch()
		return nil, err
	}
	if err := windows.AssignProcessToJobObject(job, proc); err != nil {
		return fail(fmt.Errorf("assign to job: %w", err))
	}
	ident := Identity{Isolation: Job, Pid: pid, Job: name, Marker: spec.Marker}
	var c, e, k, u windows.Filetime
	if windows.GetProcessTimes(proc, &c, &e, &k, &u) == nil {
		ident.StartTime = uint64(c.Nanoseconds())
	}
	if spec.Hold != nil {
		if err := spec.Hold(ident); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrHold, err))
		}
	}
	if err := resume(proc, uint32(pid)); err != nil {
		return fail(fmt.Errorf("resume: %w", err))
	}
	t := &jobTree{ident: ident, job: job, proc: proc, events: events, exited: make(chan struct{})}
	go t.wait()
	return t, nil
}

// resume resumes the root, created suspended. syscall.StartProcess does
// not return the handle of the root's thread, and the documented way to
// find it (resumeProcess) is a snapshot of every thread on the machine,
// which grows with what else runs there; NtResumeProcess resumes the
// threads of one process in one call. It is ntdll's, undocumented but
// unchanged since Windows XP (Sysinternals' pssuspend uses it); where it
// is missing or fails, the snapshot does the work.
func resume(proc windows.Handle, pid uint32) error {
	if procNtResumeProcess.Find() == nil {
		if st, _, _ := procNtResumeProcess.Call(uintptr(proc)); st == 0 {
			return nil
		}
	}
	return resumeProcess(pid)
}

// resumeProcess resumes every thread of a process created suspended (it
// has one).
func resumeProcess(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(snap)
	var te windows.ThreadEntry32
	te.Size = uint32(unsafe.Sizeof(te))
	resumed := 0
	for err = windows.Thread32First(snap, &te); err == nil; err = windows.Thread32Next(snap, &te) {
		if te.OwnerProcessID != pid {
			continue
		}
		th, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, te.ThreadID)
		if err != nil {
			return err
		}
		_, err = windows.ResumeThread(th)
		windows.CloseHandle(th)
		if err != nil {
			return err
		}
		resumed++
	}
	if resumed == 0 {
		return errors.New("no thread to resume")
	}
	return nil
}

type jobTree struct {
	ident  Identity
	job    windows.Handle
	proc   windows.Handle
	events *jobEvents // what the job's completion port said
	exited chan struct{}
	status Status
}

func (t *jobTree) wait() {
	windows.WaitForSingleObject(t.proc, windows.INFINITE)
	var code uint32
	if err := windows.GetExitCodeProcess(t.proc, &code); err != nil {
		t.status = Status{Code: -1}
	} else {
		t.status = Status{Code: int(code)}
	}
	close(t.exited)
}

func (t *jobTree) Identity() Identity      { return t.ident }
func (t *jobTree) Exited() <-chan struct{} { return t.exited }
func (t *jobTree) Status() Status          { return t.status }

// Terminate has no graceful form for a job of arbitrary (possibly
// windowless) processes: the caller goes straight to Kill.
func (t *jobTree) Terminate() error { return ErrUnsupported }

func (t *jobTree) Kill() error {
	t.events.killing()
	if err := windows.TerminateJobObject(t.job, 1); err != nil {
		return fmt.Errorf("TerminateJobObject: %w", err)
	}
	return nil
}

func (t *jobTree) Members() ([]int, error) {
	pids, err := jobPids(t.job)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.exited:
		pids = without(pids, t.ident.Pid)
	default:
	}
	return pids, nil
}

func without(pids []int, drop int) []int {
	out := pids[:0]
	for _, p := range pids {
		if p != drop {
			out = append(out, p)
		}
	}
	return out
}

func jobPids(job windows.Handle) ([]int, error) { return jobPidsFrom(job, 1024) }

// jobPidsFrom is jobPids with room for room pids at first; it grows the
// buffer until the whole list fits.
func jobPidsFrom(job windows.Handle, room int) ([]int, error) {
	// JOBOBJECT_BASIC_PROCESS_ID_LIST: two DWORD counts (assigned, and in
	// the list), then the ULONG_PTR pids, at offset 8 on 386 and amd64.
	const header = 8
	word := int(unsafe.Sizeof(uintptr(0)))
	for try := 0; ; try++ {
		buf := make([]uintptr, header/word+room)
		err := windows.QueryInformationJobObject(job, windows.JobObjectBasicProcessIdList,
			uintptr(unsafe.Pointer(&buf[0])), uint32(len(buf)*word), nil)
		if err != nil && err != windows.ERROR_MORE_DATA {
			return nil, fmt.Errorf("job process list: %w", err)
		}
		assigned := int(*(*uint32)(unsafe.Pointer(&buf[0])))
		n := int(*(*uint32)(unsafe.Add(unsafe.Pointer(&buf[0]), 4)))
		if n < assigned {
			// Not all fit (ERROR_MORE_DATA, or a success status that
			// says the same): room for them and for some joining.
			if try == 16 {
				return nil, fmt.Errorf("job process list: %d processes, still growing after %d tries", assigned, try)
			}
			room = max(assigned+assigned/4+16, 2*room)
			continue
		}
		ids := unsafe.Slice((*uintptr)(unsafe.Add(unsafe.Pointer(&buf[0]), header)), n)
		pids := make([]int, 0, n)
		for _, id := range ids {
			pids = append(pids, int(id))
		}
		return pids, nil
	}
}

// activeProcesses reads ActiveProcesses of the job's accounting.
func activeProcesses(job windows.Handle) (uint32, error) {
	info, err := queryAccounting(job)
	return info.ActiveProcesses, err
}

func waitJobEmpty(job windows.Handle, timeout time.Duration) error {
	return pollEmpty(timeout, "job", func() (int, error) {
		n, err := activeProcesses(job)
		return int(n), err
	})
}

func (t *jobTree) WaitEmpty(timeout time.Duration) error { return waitJobEmpty(t.job, timeout) }

func (t *jobTree) KillProcs(pids []int) error {
	var errs []error
	for _, pid := range pids {
		h, err := windows.OpenProcess(windows.PROCESS_TERMINATE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
		if err != nil {
			continue // gone
		}
		var in int32
		r, _, _ := procIsProcessInJob.Call(uintptr(h), uintptr(t.job), uintptr(unsafe.Pointer(&in)))
		if r != 0 && in != 0 {
			if err := windows.TerminateProcess(h, 1); err != nil {
				errs = append(errs, fmt.Errorf("terminate %d: %w", pid, err))
			}
		}
		windows.CloseHandle(h)
	}
	return errors.Join(errs...)
}

// Release is a no-op: a process cannot leave a job, but the job does not
// kill it when its handle is closed.
func (t *jobTree) Release(pids []int) error { return nil }

func (t *jobTree) Close() error {
	<-t.exited
	windows.CloseHandle(t.proc)
	err := windows.CloseHandle(t.job)
	t.events.unwatch()
	return err
}

func holders(pids []int, files []*os.File) ([]int, error) { return nil, ErrUnsupported }

// OwnAllChildren has nothing to do on Windows.
func OwnAllChildren() {}

// CgroupBase reports that there are no cgroups here.
func CgroupBase() (string, error) { return "", ErrUnsupported }

const canAdopt = false

func adoptLive(Identity) (Tree, error) { return nil, ErrUnsupported }

func adopt(ident Identity) (Orphan, error) {
	if ident.Isolation != Job || !strings.HasPrefix(ident.Job, `Local\corral-`) {
		return nil, fmt.Errorf("isolation %q: %w", ident.Isolation, ErrUnsupported)
	}
	name, err := windows.UTF16PtrFromString(ident.Job)
	if err != nil {
		return nil, err
	}
	const jobAllAccess = 0x1F001F
	h, _, callErr := procOpenJobObjectW.Call(jobAllAccess, 0, uintptr(unsafe.Pointer(name)))
	if h == 0 {
		if callErr == windows.ERROR_FILE_NOT_FOUND {
			return nil, fmt.Errorf("job %s: %w", ident.Job, ErrGone)
		}
		return nil, fmt.Errorf("open job %s: %w", ident.Job, callErr)
	}
	return &jobOrphan{job: windows.Handle(h)}, nil
}

// jobOrphan is a job found again by its name: the name is corral's own,
// so every process in it is the tree's.
type jobOrphan struct{ job windows.Handle }

func (o *jobOrphan) Members() ([]int, error)         { return jobPids(o.job) }
func (o *jobOrphan) Kill() error                     { return windows.TerminateJobObject(o.job, 1) }
func (o *jobOrphan) WaitEmpty(d time.Duration) error { return waitJobEmpty(o.job, d) }
func (o *jobOrphan) Remove() error                   { return windows.CloseHandle(o.job) }

func processAlive(pid int, start uint64) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION|windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	if start != 0 {
		var c, e, k, u windows.Filetime
		if windows.GetProcessTimes(h, &c, &e, &k, &u) == nil && uint64(c.Nanoseconds()) != start {
			return false
		}
	}
	ev, _ := windows.WaitForSingleObject(h, 0)
	return ev == uint32(windows.WAIT_TIMEOUT)
}

func selfStart() uint64 {
	var c, e, k, u windows.Filetime
	if windows.GetProcessTimes(windows.CurrentProcess(), &c, &e, &k, &u) != nil {
		return 0
	}
	return uint64(c.Nanoseconds())
}

func reclaimTerminal(f *os.File) error { return ErrUnsupported }
