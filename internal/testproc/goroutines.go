package testproc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// GoroutineSettle bounds how long Guard's cleanup waits for the test's
// goroutines to end before it reports them as leaked. A goroutine that
// owns a process or a descriptor of the test ends moments after the
// test's own cleanups closed them; one that is still running after this
// has no owner that waits for it.
const GoroutineSettle = 2 * time.Second

// guardLabel is the profiler label key that marks a test's goroutines.
const guardLabel = "corral-test-guard"

// labelGoroutine marks the calling goroutine, and so every goroutine it
// starts from now on (and they start in turn), as kv's.
func labelGoroutine(kv string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(guardLabel, kv)))
}

// Stack is one group of identical goroutine stacks in a goroutine
// profile: how many goroutines run it, and its frames' functions and
// positions, innermost first.
type Stack struct {
	Count  int
	Frames []string
}

// Goroutines lists the running goroutines that carry kv's label (those
// started, directly or not, by the goroutine of the test that got kv from
// Guard), without those of the runtime and the testing package, and
// without the calling goroutine.
func Goroutines(kv string) []Stack {
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 1)
	label := strconv.Quote(guardLabel) + ":" + strconv.Quote(kv)
	var out []Stack
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		st, labels, ok := parseRecord(rec)
		if !ok || !strings.Contains(labels, label) || ignored(st) {
			continue
		}
		out = append(out, st)
	}
	return out
}

// parseRecord parses one record of a debug=1 goroutine profile:
//
//	N @ 0x... 0x...
//	# labels: {"k":"v"}
//	#	0x...	pkg.func+0x1c	/path/file.go:12
func parseRecord(rec string) (st Stack, labels string, ok bool) {
	s := bufio.NewScanner(strings.NewReader(strings.TrimSpace(rec)))
	if !s.Scan() {
		return st, "", false
	}
	if strings.HasPrefix(s.Text(), "goroutine profile:") && !s.Scan() {
		return st, "", false // the header, on the first record
	}
	n, _, found := strings.Cut(s.Text(), " @ ")
	if !found {
		return st, "", false
	}
	st.Count, _ = strconv.Atoi(n)
	for s.Scan() {
		line := s.Text()
		if l, ok := strings.CutPrefix(line, "# labels: "); ok {
			labels = l
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "#" {
			fn, _, _ := strings.Cut(f[2], "+0x")
			st.Frames = append(st.Frames, fn+" "+f[3])
		}
	}
	return st, labels, st.Count > 0 && len(st.Frames) > 0
}

// processLifetime lists the goroutines that a package starts once, the
// first time it is used, and that run for the life of the process: they
// carry the label of whichever test happened to use the package first, but
// no test owns them. Each entry is a package prefix, or a package path and
// the name of the function (its closures included, inlined or not) that
// starts the goroutine.
var processLifetime = []struct{ pkg, fn string }{
	{"runtime.", ""},
	{"testing.", ""},
	{"os/signal.", "loop"},
	// The pgroup backend's child subreaper loop (started with its first tree).
	{"github.com/corral-dev/corral/internal/contain.", "startReaper"},
}

// ignored reports whether a stack is not the test's to own: the calling
// goroutine (it is writing the profile), or one whose outermost function
// is a process-lifetime goroutine's.
func ignored(st Stack) bool {
	for _, f := range st.Frames {
		if strings.HasPrefix(f, "runtime/pprof.writeGoroutine ") {
			return true
		}
	}
	outer, _, _ := strings.Cut(st.Frames[len(st.Frames)-1], " ")
	for _, pl := range processLifetime {
		name, ok := strings.CutPrefix(outer, pl.pkg)
		if !ok {
			continue
		}
		// "loop", "startReaper.func1.1", or inlined into a caller:
		// "startPgroup.startReaper.func2.1".
		if pl.fn == "" || name == pl.fn || strings.HasPrefix(name, pl.fn+".") || strings.Contains(name, "."+pl.fn+".") {
			return true
		}
	}
	return false
}

// settleGoroutines waits up to d for kv's goroutines to end and returns
// those still running.
func settleGoroutines(kv string, d time.Duration) []Stack {
	deadline := time.Now().Add(d)
	for {
		left := Goroutines(kv)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func count(sts []Stack) int {
	n := 0
	for _, st := range sts {
		n += st.Count
	}
	return n
}

func formatStacks(sts []Stack) string {
	var b strings.Builder
	for _, st := range sts {
		fmt.Fprintf(&b, "%d goroutine(s):\n", st.Count)
		for _, f := range st.Frames {
			fmt.Fprintf(&b, "\t%s\n", f)
		}
	}
	return b.String()
}
