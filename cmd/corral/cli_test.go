package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// corralBin is the corral binary built once for these tests.
var corralBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "corral-cli-test")
	if err != nil {
		panic(err)
	}
	corralBin = filepath.Join(dir, "corral")
	if out, err := exec.Command("go", "build", "-o", corralBin, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cli prepares a corral invocation with the test's marker and its own
// state directory.
func cli(t *testing.T, mark, state string, args ...string) *exec.Cmd {
	c := exec.Command(corralBin, args...)
	c.Env = append(testproc.Env(mark), "CORRAL_STATE_DIR="+state)
	return c
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

func TestRunClosedStdoutEndsCommandWithSIGPIPE(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	state := t.TempDir()
	res := filepath.Join(state, "r.json")
	c := cli(t, mark, state, "run", "--result", res, "--", "yes")
	var errb bytes.Buffer
	c.Stderr = &errb
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := out.Read(buf); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	out.Close() // as `| head -c 4` would
	if got := exitCode(c.Wait()); got != 128+int(syscall.SIGPIPE) {
		t.Fatalf("exit %d, want %d (yes killed by SIGPIPE)", got, 128+int(syscall.SIGPIPE))
	}
	var r map[string]any
	b, _ := os.ReadFile(res)
	if err := json.Unmarshal(b, &r); err != nil || r["outcome"] != "signaled" || r["signal"] != float64(syscall.SIGPIPE) {
		t.Fatalf("result %s (%v)", b, err)
	}
}
