package corral_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// The test binary doubles as the helper programs of the tests that cannot
// use a shell (Windows): CORRAL_HELPER selects one, and TestMain runs it
// instead of the tests.
const helperEnv = "CORRAL_HELPER"

var helpers = map[string]func(args []string) int{
	// sleep SECONDS
	"sleep": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		time.Sleep(time.Duration(n) * time.Second)
		return 0
	},
	// exit CODE
	"exit": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		return n
	},
	// touch FILE: create FILE, then exit 0.
	"touch": func(args []string) int {
		os.WriteFile(args[0], nil, 0o644)
		return 0
	},
	// spawn N SECONDS [ROOT]: start N children sleeping SECONDS (they
	// inherit stdout), print their pids, then sleep ROOT seconds (default
	// SECONDS).
	"spawn": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		for i := 0; i < n; i++ {
			c := helperCmd("sleep", args[1])
			c.Stdout = os.Stdout
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Println(c.Process.Pid)
		}
		secs, _ := strconv.Atoi(args[1])
		if len(args) > 2 {
			secs, _ = strconv.Atoi(args[2])
		}
		time.Sleep(time.Duration(secs) * time.Second)
		return 0
	},
	// orphan SECONDS: start a child sleeping SECONDS with no stdio, print
	// its pid, exit 0.
	"orphan": func(args []string) int {
		c := helperCmd("sleep", args[0])
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(c.Process.Pid)
		return 0
	},
	// alloc MIB: allocate MIB MiB at once and touch every page, then exit 0.
	"alloc": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		runtime.KeepAlive(b)
		return 0
	},
	// spin MS: keep a CPU busy for MS milliseconds of wall time.
	"spin": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		end := time.Now().Add(time.Duration(n) * time.Millisecond)
		x := 0
		for time.Now().Before(end) {
			x++
		}
		return x & 0
	},
	// flood: write to stdout for ever.
	"flood": func(args []string) int {
		buf := make([]byte, 32<<10)
		for {
			if _, err := os.Stdout.Write(buf); err != nil {
				return 1
			}
		}
	},
}

// helperCmd is an os/exec command running a helper of this binary.
func helperCmd(name string, args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], args...)
	c.Env = append(os.Environ(), helperEnv+"="+name)
	return c
}

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		h, ok := helpers[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown helper %q\n", name)
			os.Exit(2)
		}
		os.Exit(h(os.Args[1:]))
	}
	os.Exit(m.Run())
}
