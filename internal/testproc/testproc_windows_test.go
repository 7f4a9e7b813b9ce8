package testproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSurvivorsFindsAMarkedProcess: a process started with the marker is
// listed while it runs, and not once it is gone; an unmarked one never.
func TestSurvivorsFindsAMarkedProcess(t *testing.T) {
	kv := Guard(t, 60*time.Second)
	sys32 := filepath.Join(os.Getenv("SystemRoot"), "System32")
	start := func(env []string, argv ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(sys32, argv[0]), argv[1:]...)
		c.Env = env
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The marked one is cmd.exe and the ping it starts, which inherits
	// the marker; the unmarked one a ping alone, killed by its pid.
	marked := start(Env(kv), "cmd.exe", "/c", "ping -n 30 127.0.0.1 >NUL")
	plain := start(os.Environ(), "ping.exe", "-n", "30", "127.0.0.1")
	defer func() {
		plain.Process.Kill()
		plain.Wait()
	}()
	found := func() []int {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if got := Survivors(kv); len(got) >= 2 || time.Now().After(deadline) {
				return got
			}
		}
	}
	got := found()
	if !slices.Contains(got, marked.Process.Pid) {
		t.Fatalf("Survivors(%q) = %v, want the marked cmd.exe %d in it", kv, got, marked.Process.Pid)
	}
	if slices.Contains(got, plain.Process.Pid) {
		t.Fatalf("Survivors lists the unmarked %d: %v", plain.Process.Pid, got)
	}
	if len(got) != 2 {
		t.Errorf("Survivors = %v, want cmd.exe and its ping", got)
	}
	// Kill by what was listed: the test's own marked processes.
	for _, pid := range got {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
	marked.Wait()
	if left := settle(kv, 5*time.Second); len(left) > 0 {
		t.Fatalf("still listed after they were killed: %v", left)
	}
}
