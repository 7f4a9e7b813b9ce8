package contain

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestJobMembersPastTheFirstBuffer: a job with more processes than the
// first buffer holds lists all of them (the list was cut at 1024).
func TestJobMembersPastTheFirstBuffer(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	// cmd.exe and three pings, all alive for a while.
	tree, err := startCmd(t, mark, Limits{}, nil, "start /b ping -n 20 127.0.0.1 & start /b ping -n 20 127.0.0.1 & ping -n 20 127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tree.Kill()
		<-tree.Exited()
		if err := tree.WaitEmpty(KillBound); err != nil {
			t.Error(err)
		}
		tree.Close()
	}()
	job := tree.(*jobTree).job
	// Wait for the job to settle at cmd.exe and its three pings (under
	// Wine, each 'start' is a start.exe that comes and goes).
	var all []int
	for deadline, last := time.Now().Add(20*time.Second), []int(nil); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if all, err = jobPids(job); err != nil {
			t.Fatal(err)
		}
		slices.Sort(all)
		if len(all) == 4 && slices.Equal(all, last) {
			break
		}
		last = all
	}
	if len(all) != 4 {
		t.Fatalf("job has %d processes (%v), want cmd.exe and three pings", len(all), all)
	}
	got, err := jobPidsFrom(job, 1)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, all) {
		t.Fatalf("with room for one pid first: %v, %v; the job has %v", got, err, all)
	}
}

// startSuspended creates cmd.exe /c line suspended, outside any job.
func startSuspended(t testing.TB, line string) (windows.Handle, uint32) {
	t.Helper()
	sh := filepath.Join(os.Getenv("SystemRoot"), "System32", "cmd.exe")
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fd := null.Fd()
	pid, h, err := syscall.StartProcess(sh, []string{sh, "/c", line}, &syscall.ProcAttr{
		Env: os.Environ(), Files: []uintptr{fd, fd, fd},
		Sys: &syscall.SysProcAttr{CreationFlags: windows.CREATE_SUSPENDED},
	})
	if err != nil {
		t.Fatal(err)
	}
	return windows.Handle(h), uint32(pid)
}

// TestResumeRunsTheRoot: both ways of resuming a process created
// suspended let it run: NtResumeProcess, and the thread snapshot it
// falls back to.
func TestResumeRunsTheRoot(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	t.Setenv(testproc.MarkerName, mark[len(testproc.MarkerName)+1:])
	if err := procNtResumeProcess.Find(); err != nil {
		t.Fatalf("ntdll has no NtResumeProcess: %v", err)
	}
	for name, res := range map[string]func(windows.Handle, uint32) error{
		"NtResumeProcess": func(h windows.Handle, _ uint32) error {
			if st, _, _ := procNtResumeProcess.Call(uintptr(h)); st != 0 {
				return fmt.Errorf("NTSTATUS %#x", st)
			}
			return nil
		},
		"snapshot": func(_ windows.Handle, pid uint32) error { return resumeProcess(pid) },
	} {
		h, pid := startSuspended(t, "exit 7")
		ev, _ := windows.WaitForSingleObject(h, 300)
		if ev != uint32(windows.WAIT_TIMEOUT) {
			t.Errorf("%s: the process ran before it was resumed", name)
		}
		if err := res(h, pid); err != nil {
			windows.TerminateProcess(h, 1)
			t.Errorf("%s: %v", name, err)
		}
		ev, _ = windows.WaitForSingleObject(h, 20000)
		var code uint32
		windows.GetExitCodeProcess(h, &code)
		windows.CloseHandle(h)
		if ev != windows.WAIT_OBJECT_0 || code != 7 {
			t.Errorf("%s: after resuming, wait %#x, exit %d; want it to run and exit 7", name, ev, code)
		}
	}
}

// BenchmarkResume is the cost of resuming a root, by each way (the
// process creation itself is not timed). Under Wine the machine's thread
// snapshot holds only Wine's few processes; on Windows it holds all.
func BenchmarkResume(b *testing.B) {
	for _, bc := range []struct {
		name string
		res  func(windows.Handle, uint32) error
	}{
		{"NtResumeProcess", func(h windows.Handle, pid uint32) error { return resume(h, pid) }},
		{"snapshot", func(_ windows.Handle, pid uint32) error { return resumeProcess(pid) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				h, pid := startSuspended(b, "exit 0")
				b.StartTimer()
				err := bc.res(h, pid)
				b.StopTimer()
				if err != nil {
					windows.TerminateProcess(h, 1)
				}
				windows.WaitForSingleObject(h, 20000)
				windows.CloseHandle(h)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
