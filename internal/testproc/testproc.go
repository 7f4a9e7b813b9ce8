// Package testproc gives tests that start processes a marker to find them
// by, a watchdog, and a check that nothing they started survives: no
// process and no goroutine.
//
// A test calls Guard, puts the returned NAME=value entry in the environment
// of everything it starts, and is failed at cleanup if any live process
// still carries it. Survivors are then killed by pid: they carry this
// test's own random marker, so they are the test's own processes.
//
// Goroutines are marked the same way, with a profiler label that the
// runtime hands down from a goroutine to every goroutine it starts: Guard
// labels the test's goroutine, and at cleanup the test fails, with their
// stacks, if goroutines carrying its label are still running after a
// bounded settle. Goroutines of other tests, of the runtime and of the
// testing package are not counted.
package testproc

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// MarkerName is the environment variable tests mark their processes with.
const MarkerName = "CORRAL_TEST_MARK"

// Guard returns a fresh marker entry ("CORRAL_TEST_MARK=<random>"), arms a
// watchdog that fails the whole test binary with a goroutine dump if the
// test runs longer than limit, and registers the survivor check.
func Guard(t testing.TB, limit time.Duration) string {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	kv := MarkerName + "=" + t.Name() + "-" + hex.EncodeToString(b[:])
	kv = strings.ReplaceAll(kv, "/", ".")
	name := t.Name()
	dog := time.AfterFunc(limit, func() {
		killAll(kv)
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "watchdog: %s ran over %v\n%s", name, limit, buf[:n])
		os.Exit(3)
	})
	labelGoroutine(kv)
	t.Cleanup(func() {
		dog.Stop()
		if left := settle(kv, 2*time.Second); len(left) > 0 {
			killAll(kv)
			t.Errorf("processes survived the test: %v", left)
		}
		// After the processes: a goroutine waiting for one of them
		// ends once it is gone.
		if leaked := settleGoroutines(kv, GoroutineSettle); len(leaked) > 0 {
			t.Errorf("%d goroutines started by the test still run %v after it ended:\n%s",
				count(leaked), GoroutineSettle, formatStacks(leaked))
		}
	})
	return kv
}

// Env returns this process's environment plus kv.
func Env(kv string) []string { return append(os.Environ(), kv) }

// settle waits up to d for the marked processes to be gone (an exiting
// process can take a moment to leave the table) and returns what is left.
func settle(kv string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		left := Survivors(kv)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func killAll(kv string) {
	for _, pid := range Survivors(kv) {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
}

// TempDir returns a new temporary directory removed at cleanup as far as
// possible. Unlike t.TempDir, a failed removal does not fail the test: under
// Wine, os.RemoveAll answers "Invalid function" for any directory.
func TempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "corral-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
