package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-dev/corral/internal/testproc"
)

// These run under Wine here (../shared/wine/go-test.sh ./cmd/corral), and
// Wine is not Windows: its job objects take memory and process limits
// without enforcing them and lack the CPU rate cap, so corral refuses all
// three there, and the tests check the refusal (exit 125, the reason on
// stderr, nothing run). On Windows they check that each flag reaches the
// job: the allocation refused, the child refused, the CPU time capped.

// helperEnv selects a helper role of this test binary (Windows has no sh
// to write one in).
const helperEnv = "CORRAL_CLI_HELPER"

var helpers = map[string]func(args []string) int{
	// commit MIB: commit MIB MiB at once; print "committed" or
	// "refused: ERROR".
	"commit": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		if _, err := windows.VirtualAlloc(0, uintptr(n)<<20, windows.MEM_RESERVE|windows.MEM_COMMIT, windows.PAGE_READWRITE); err != nil {
			fmt.Printf("refused: %v\n", err)
			return 0
		}
		fmt.Println("committed")
		return 0
	},
	// spawn N: start N children that sleep a second, all at once; print
	// "started K" and "refused: ERROR" if one was.
	"spawn": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		var kids []*exec.Cmd
		var refused error
		for range n {
			c := exec.Command(os.Args[0])
			c.Env = append(os.Environ(), helperEnv+"=sleep")
			if refused = c.Start(); refused != nil {
				break
			}
			kids = append(kids, c)
		}
		fmt.Printf("started %d\n", len(kids))
		if refused != nil {
			fmt.Printf("refused: %v\n", refused)
		}
		for _, c := range kids {
			c.Wait()
		}
		return 0
	},
	"sleep": func([]string) int { time.Sleep(time.Second); return 0 },
	// spin MS: keep a CPU busy for MS ms of wall time.
	"spin": func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		for end := time.Now().Add(time.Duration(n) * time.Millisecond); time.Now().Before(end); {
		}
		return 0
	},
}

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		os.Exit(helpers[name](os.Args[1:]))
	}
	os.Exit(m.Run())
}

func onWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}

// runLimited runs 'corral run --no-record --result FILE FLAGS -- helper'
// in this process and returns its exit code, stdout, stderr and result.
func runLimited(t *testing.T, mark string, flags []string, helper string, args ...string) (int, string, string, map[string]any) {
	t.Helper()
	res := filepath.Join(testproc.TempDir(t), "result.json")
	t.Setenv(helperEnv, helper)
	t.Setenv(testproc.MarkerName, mark[len(testproc.MarkerName)+1:])
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	var out, errb bytes.Buffer
	argv := append(append([]string{"run", "--no-record", "--result", res}, flags...), append([]string{"--", os.Args[0]}, args...)...)
	code := Main(argv, devnull, &out, &errb)
	var r map[string]any
	if b, err := os.ReadFile(res); err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("%v: no result (%v): exit %d, %s", flags, err, code, errb.String())
	}
	return code, out.String(), errb.String(), r
}

func TestRunLimitsReachTheJob(t *testing.T) {
	mark := testproc.Guard(t, 120*time.Second)
	for _, tc := range []struct {
		flags      []string
		helper     string
		args       []string
		wineReason string
		check      func(out string, r map[string]any) error
	}{
		{[]string{"--memory", "64MiB"}, "commit", []string{"256"}, "do not enforce", func(out string, r map[string]any) error {
			acct, _ := r["accounting"].(string)
			if !strings.HasPrefix(out, "refused: ") || !strings.Contains(acct, "the job memory limit was reached") {
				return fmt.Errorf("256 MiB under --memory 64MiB: %q, accounting %q", out, acct)
			}
			return nil
		}},
		{[]string{"--pids", "3"}, "spawn", []string{"5"}, "do not enforce", func(out string, r map[string]any) error {
			if !strings.HasPrefix(out, "started 2\nrefused: ") || r["pids_peak"] != float64(3) {
				return fmt.Errorf("5 children under --pids 3: %q, pids_peak %v", out, r["pids_peak"])
			}
			return nil
		}},
		{[]string{"--cpus", "0.5"}, "spin", []string{"2000"}, "do not enforce", func(out string, r map[string]any) error {
			user, _ := r["cpu_user_ms"].(float64)
			sys, _ := r["cpu_system_ms"].(float64)
			wall, _ := r["duration_ms"].(float64)
			if user+sys == 0 || user+sys > 0.75*wall+100 {
				return fmt.Errorf("%.0f ms of CPU in %.0f ms under --cpus 0.5", user+sys, wall)
			}
			return nil
		}},
	} {
		code, out, errb, r := runLimited(t, mark, tc.flags, tc.helper, tc.args...)
		if onWine() {
			if code != 125 || r["outcome"] != "start_failed" || !strings.Contains(errb, tc.wineReason) || out != "" {
				t.Errorf("%v under Wine: exit %d, want 125 and %q on stderr; stdout %q, stderr %q", tc.flags, code, tc.wineReason, out, errb)
			}
			continue
		}
		if code != 0 || r["outcome"] != "exited" {
			t.Errorf("%v: exit %d, %v: %s", tc.flags, code, r, errb)
			continue
		}
		if err := tc.check(out, r); err != nil {
			t.Error(err)
		}
	}
}
