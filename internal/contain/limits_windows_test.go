package contain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/corral-dev/corral/internal/testproc"
)

func TestCPURate(t *testing.T) {
	for _, tc := range []struct {
		cpus float64
		n    int
		want uint32
	}{
		{0.5, 2, 2500}, {1, 4, 2500}, {2, 2, 10000}, {8, 2, 10000}, {0.0001, 64, 1}, {1.5, 3, 5000}, {1, 0, 10000},
	} {
		if got := cpuRate(tc.cpus, tc.n); got != tc.want {
			t.Errorf("cpuRate(%g, %d) = %d, want %d", tc.cpus, tc.n, got, tc.want)
		}
	}
}

func TestJobMemoryLimitFitsSizeT(t *testing.T) {
	big := int64(5 << 30)
	want := uintptr(big)
	if unsafe.Sizeof(uintptr(0)) == 4 {
		want = ^uintptr(0) // all of a 32-bit address space, not 1 GiB
	}
	if got := jobMemoryLimit(big); got != want {
		t.Errorf("jobMemoryLimit(5 GiB) = %d, want %d", got, want)
	}
	if got := jobMemoryLimit(64 << 20); got != 64<<20 {
		t.Errorf("jobMemoryLimit(64 MiB) = %d", got)
	}
}

// startCmd starts cmd.exe /c line contained, with stdio on the null
// device.
func startCmd(t *testing.T, mark string, l Limits, hold func(Identity) error, line string) (Tree, error) {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	sh := filepath.Join(os.Getenv("SystemRoot"), "System32", "cmd.exe")
	return Start(Job, &Spec{
		Path: sh, Argv: []string{sh, "/c", line}, Env: os.Environ(),
		Files: []*os.File{null, null, null}, Marker: mark, Hold: hold, Limits: l,
	})
}

// TestJobLimitsBeforeTheRootRuns: while the root is held before its first
// instruction, its job already has every limit asked for. Windows only:
// Wine answers the query with zeros, and corral refuses these limits
// under Wine (TestJobLimitsRefusedUnderWine).
func TestJobLimitsBeforeTheRootRuns(t *testing.T) {
	if underWine() {
		t.Skip("Wine reports no job limits (its query answers zeros); this runs on Windows")
	}
	mark := testproc.Guard(t, 60*time.Second)
	l := Limits{MemoryMax: 64 << 20, PidsMax: 5, CPUs: 0.5}
	var held windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	var rate jobCPURateControl
	hold := func(id Identity) error {
		name, _ := windows.UTF16PtrFromString(id.Job)
		h, _, err := procOpenJobObjectW.Call(0x1F001F, 0, uintptr(unsafe.Pointer(name)))
		if h == 0 {
			return err
		}
		defer windows.CloseHandle(windows.Handle(h))
		if err := windows.QueryInformationJobObject(windows.Handle(h), windows.JobObjectExtendedLimitInformation,
			uintptr(unsafe.Pointer(&held)), uint32(unsafe.Sizeof(held)), nil); err != nil {
			return err
		}
		return windows.QueryInformationJobObject(windows.Handle(h), windows.JobObjectCpuRateControlInformation,
			uintptr(unsafe.Pointer(&rate)), uint32(unsafe.Sizeof(rate)), nil)
	}
	tree, err := startCmd(t, mark, l, hold, "exit 0")
	if err != nil {
		t.Fatal(err)
	}
	<-tree.Exited()
	if err := tree.WaitEmpty(KillBound); err != nil {
		t.Error(err)
	}
	tree.Close()
	flags := held.BasicLimitInformation.LimitFlags
	if flags&windows.JOB_OBJECT_LIMIT_JOB_MEMORY == 0 || held.JobMemoryLimit != 64<<20 ||
		flags&windows.JOB_OBJECT_LIMIT_ACTIVE_PROCESS == 0 || held.BasicLimitInformation.ActiveProcessLimit != 5 {
		t.Errorf("job limits while the root was held: flags %#x, memory %d, processes %d",
			flags, held.JobMemoryLimit, held.BasicLimitInformation.ActiveProcessLimit)
	}
	n := int(windows.GetActiveProcessorCount(windows.ALL_PROCESSOR_GROUPS))
	if rate.ControlFlags&(jobObjectCPURateControlEnable|jobObjectCPURateControlHardCap) != 0x5 || rate.CPURate != cpuRate(0.5, n) {
		t.Errorf("CPU rate while the root was held: %+v, want a hard cap of %d", rate, cpuRate(0.5, n))
	}
}

// TestJobLimitsRefusedUnderWine: Wine's job objects accept memory and
// process limits and enforce neither, and have no CPU rate cap; corral
// must refuse all three there, before anything runs.
func TestJobLimitsRefusedUnderWine(t *testing.T) {
	if !underWine() {
		t.Skip("not under Wine: the limits are enforced here (TestJobLimitsBeforeTheRootRuns)")
	}
	mark := testproc.Guard(t, 60*time.Second)
	ran := filepath.Join(testproc.TempDir(t), "ran")
	for _, l := range []Limits{{MemoryMax: 64 << 20}, {PidsMax: 5}, {CPUs: 0.5}, {MemoryHigh: 64 << 20}} {
		tree, err := startCmd(t, mark, l, nil, "echo x > "+ran)
		if err == nil {
			<-tree.Exited()
			tree.WaitEmpty(KillBound)
			tree.Close()
			t.Fatalf("%+v: started under Wine", l)
		}
		if !errors.Is(err, ErrIsolation) || !strings.Contains(err.Error(), "Wine") && l.MemoryHigh == 0 {
			t.Errorf("%+v: %v", l, err)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("a command ran although its limits were refused")
	}
}

// BenchmarkJobUsage is what reading accounting adds to every run (the
// issue's goal: under 100 us). Under Wine each query is a round trip to
// wineserver, so a Wine figure is an upper bound, not Windows's.
func BenchmarkJobUsage(b *testing.B) {
	mark := testproc.Guard(b, 120*time.Second)
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	sh := filepath.Join(os.Getenv("SystemRoot"), "System32", "cmd.exe")
	tree, err := Start(Job, &Spec{Path: sh, Argv: []string{sh, "/c", "exit 0"}, Env: os.Environ(),
		Files: []*os.File{null, null, null}, Marker: mark})
	if err != nil {
		b.Fatal(err)
	}
	<-tree.Exited()
	if err := tree.WaitEmpty(KillBound); err != nil {
		b.Fatal(err)
	}
	defer tree.Close()
	a := tree.(Accounter)
	if u := a.Usage(); u.PidsPeak == nil || *u.PidsPeak != 1 {
		b.Fatalf("usage of one cmd.exe: %+v", u)
	}
	b.ReportAllocs()
	for b.Loop() {
		a.Usage()
	}
}
