package contain

import (
	"bufio"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/proc"
	"github.com/corral-dev/corral/internal/testproc"
)

// BenchmarkGroupSignalCheck: the bookkeeping a graceful stop of a cgroup
// tree does after its one kill(-pgid), on a live tree of 1000 sleeps (none
// signalled), in one run: learning which members had the group signal from
// a listing taken before it and getpgid (hadGroupSignal, what Terminate
// does) against reading every member's /proc/PID/stat for its group and
// start time (statHadGroupSignal, what it did). The processes are the same and
// nothing dies meanwhile, so the ratio is the checks' own cost; on a loaded
// machine the whole stop (BenchmarkCancel) moves too much to show it.
func BenchmarkGroupSignalCheck(b *testing.B) {
	if _, err := cgroupBase(); err != nil {
		b.Skipf("no cgroup v2 to run in: %v", err)
	}
	const n = 1000
	mark := testproc.Guard(b, 5*time.Minute)
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	tree, err := Start(Cgroup, &Spec{
		Path:   "/bin/sh",
		Argv:   []string{"sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do sleep 1000 & i=$((i+1)); done; echo ready; wait", n)},
		Env:    testproc.Env(mark),
		Files:  []*os.File{null, w, w},
		Marker: "CORRAL_BENCH_TREE=group-signal-check",
	})
	w.Close()
	if err != nil {
		b.Fatal(err)
	}
	ct := tree.(*cgroupTree)
	defer func() {
		ct.Kill()
		if err := ct.WaitEmpty(KillBound); err != nil {
			b.Error(err)
		}
		if err := ct.Close(); err != nil {
			b.Error(err)
		}
	}()
	if line, err := bufio.NewReader(r).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("tree not up: %q %v", line, err)
	}
	pgid, tick := ct.ident.Pgid, bootTicks()+1
	var byStat, byListing time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		pids, err := cgroupProcs(ct.dir)
		if err != nil {
			b.Fatal(err)
		}
		had := 0
		for _, p := range pids {
			if statHadGroupSignal(p, pgid, tick) {
				had++
			}
		}
		byStat += time.Since(t)
		if had != n+1 {
			b.Fatalf("stat check: %d of %d had it", had, len(pids))
		}

		t = time.Now()
		before, err := cgroupProcs(ct.dir)
		if err != nil {
			b.Fatal(err)
		}
		listed := make(map[int]bool, len(before))
		for _, p := range before {
			listed[p] = true
		}
		if pids, err = cgroupProcs(ct.dir); err != nil {
			b.Fatal(err)
		}
		had = 0
		for _, p := range pids {
			if hadGroupSignal(p, pgid, listed) {
				had++
			}
		}
		byListing += time.Since(t)
		if had != n+1 {
			b.Fatalf("listing check: %d of %d had it", had, len(pids))
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(per(byStat), "stat-ms")
	b.ReportMetric(per(byListing), "listing-ms")
	b.ReportMetric(float64(byListing)/float64(byStat), "x-stat")
}

// statHadGroupSignal is the check Terminate made before hadGroupSignal: pid
// is in group pgid and started before tick, from its /proc/PID/stat.
func statHadGroupSignal(pid, pgid int, tick uint64) bool {
	st, err := proc.ReadStat(pid)
	return err == nil && st.Pgid == pgid && st.StartTime < tick
}
