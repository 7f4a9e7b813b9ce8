package testproc

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestGoroutinesFindsWhatATestStarted: a goroutine started (through
// another) by a goroutine that Guard labelled is found with its stack, a
// goroutine of another test is not, and neither is found once they ended.
func TestGoroutinesFindsWhatATestStarted(t *testing.T) {
	const mine, theirs = MarkerName + "=mine", MarkerName + "=theirs"
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	ended := make(chan struct{}, 2)
	for _, kv := range []string{mine, theirs} {
		go func() {
			labelGoroutine(kv)
			go func() { // the label is inherited by grandchildren too
				go blockUntil(release, started, ended)
			}()
		}()
	}
	<-started
	<-started
	got := Goroutines(mine)
	if count(got) != 1 || !strings.Contains(formatStacks(got), "testproc.blockUntil") {
		t.Fatalf("want the one goroutine blocked in blockUntil, got:\n%s", formatStacks(got))
	}
	if self := Goroutines(MarkerName + "=nobody"); len(self) != 0 {
		t.Fatalf("goroutines of no test reported:\n%s", formatStacks(self))
	}
	close(release)
	<-ended
	<-ended
	if left := settleGoroutines(mine, 2*time.Second); len(left) != 0 {
		t.Fatalf("ended goroutine still reported:\n%s", formatStacks(left))
	}
}

func blockUntil(release <-chan struct{}, started, ended chan<- struct{}) {
	started <- struct{}{}
	<-release
	ended <- struct{}{}
}

// TestGuardLabelsTheTestGoroutine: after Guard, what the test starts
// carries the test's marker, and the test's own goroutine (which runs
// the check at cleanup) is not reported.
func TestGuardLabelsTheTestGoroutine(t *testing.T) {
	kv := Guard(t, 30*time.Second)
	if got := Goroutines(kv); len(got) != 0 {
		t.Fatalf("the test's own goroutine reported:\n%s", formatStacks(got))
	}
	release, started, ended := make(chan struct{}), make(chan struct{}, 1), make(chan struct{}, 1)
	go blockUntil(release, started, ended)
	<-started
	if got := Goroutines(kv); count(got) != 1 {
		t.Fatalf("want the test's goroutine, got:\n%s", formatStacks(got))
	}
	close(release)
	<-ended
}

// TestGuardFailsALeakingTest runs TestLeakingChild in a child test binary:
// it must fail, naming the goroutine it leaked.
func TestGuardFailsALeakingTest(t *testing.T) {
	c := exec.Command(os.Args[0], "-test.run=^TestLeakingChild$", "-test.count=1")
	c.Env = append(os.Environ(), "CORRAL_TESTPROC_LEAK=1")
	out, err := c.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "1 goroutines started by the test still run") ||
		!strings.Contains(string(out), "testproc.leakForever") {
		t.Fatalf("a leaking test was not failed with the leaked stack: %v\n%s", err, out)
	}
}

func TestLeakingChild(t *testing.T) {
	if os.Getenv("CORRAL_TESTPROC_LEAK") == "" {
		t.Skip("run by TestGuardFailsALeakingTest")
	}
	Guard(t, 30*time.Second)
	go leakForever()
}

func leakForever() { select {} }

// TestProcessLifetimeGoroutinesIgnored: the subreaper loop is ignored in
// both the forms the compiler gives its name (inlined under -race or
// not), and a test's own goroutine is not.
func TestProcessLifetimeGoroutinesIgnored(t *testing.T) {
	for fn, want := range map[string]bool{
		"github.com/corral-dev/corral/internal/contain.startReaper.func1.1":             true,
		"github.com/corral-dev/corral/internal/contain.startPgroup.startReaper.func2.1": true,
		"os/signal.loop":  true,
		"testing.tRunner": true,
		"github.com/corral-dev/corral.escalation.func1":                false,
		"github.com/corral-dev/corral/internal/contain.startReaperish": false,
	} {
		if got := ignored(Stack{Count: 1, Frames: []string{fn + " /x.go:1"}}); got != want {
			t.Errorf("ignored(%s) = %v, want %v", fn, got, want)
		}
	}
}
