package proc

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkReadStat: ReadStat of this process against os.ReadFile of the
// same file plus the same parse, in one run (a stop of a 1000-process tree
// reads 1000 of them). Reports the time ratio.
func BenchmarkReadStat(b *testing.B) {
	pid := os.Getpid()
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	var ours, plain time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := ReadStat(pid); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(t)
		t = time.Now()
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := parseStat(pid, data); err != nil {
			b.Fatal(err)
		}
		plain += time.Since(t)
	}
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "readstat-ns")
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "readfile-ns")
	b.ReportMetric(float64(ours)/float64(plain), "x-readfile")
}
