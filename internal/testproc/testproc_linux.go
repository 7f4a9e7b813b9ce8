package testproc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PidFile waits for a command to write its pid to path and returns it,
// failing the test if no live pid appears there within d.
func PidFile(t testing.TB, path string, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && Alive(pid) {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no live pid in %s after %v (%q)", path, d, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Survivors lists the live processes whose environment holds kv.
func Survivors(kv string) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	self := os.Getpid()
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/environ")
		if err != nil {
			continue
		}
		for _, e := range bytes.Split(b, []byte{0}) {
			if string(e) == kv {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// Cgroup2 returns pid's cgroup v2 path, relative to the cgroup2 mount,
// from /proc/PID/cgroup (its "0::" line: a hybrid host lists v1 first);
// ok is false when there is no such line or pid is gone.
func Cgroup2(pid int) (rel string, ok bool) {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	for _, line := range strings.Split(string(b), "\n") {
		if p, found := strings.CutPrefix(line, "0::"); found {
			rel, ok = p, true
		}
	}
	return rel, ok
}
