package corral_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-dev/corral"
)

func init() {
	// breakaway: try to start a child outside the job
	// (CREATE_BREAKAWAY_FROM_JOB); print "refused", or "escaped PID".
	helpers["breakaway"] = func(args []string) int {
		c := helperCmd("sleep", "30")
		c.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_BREAKAWAY_FROM_JOB}
		if err := c.Start(); err != nil {
			fmt.Println("refused")
			return 0
		}
		fmt.Printf("escaped %d\n", c.Process.Pid)
		os.Stdout.Sync()
		return 0
	}
}

func init() {
	// commit MIB: commit MIB MiB of memory in one VirtualAlloc (the
	// commit charge, which a job memory limit counts, is taken there,
	// untouched pages or not); print "committed", or "refused: ERROR",
	// and exit 0 either way: a job memory limit fails the allocation, it
	// kills nothing.
	helpers["commit"] = func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		size := uintptr(n) << 20
		if _, err := windows.VirtualAlloc(0, size, windows.MEM_RESERVE|windows.MEM_COMMIT, windows.PAGE_READWRITE); err != nil {
			fmt.Printf("refused: %v\n", err)
			return 0
		}
		fmt.Println("committed")
		return 0
	}
	// spawnall N SECONDS: try to start N children sleeping SECONDS, all
	// at once; print "started K" and, if one was refused, "refused:
	// ERROR"; then wait for the children started.
	helpers["spawnall"] = func(args []string) int {
		n, _ := strconv.Atoi(args[0])
		var started []*exec.Cmd
		var refused error
		for i := 0; i < n; i++ {
			c := helperCmd("sleep", args[1])
			if err := c.Start(); err != nil {
				refused = err
				break
			}
			started = append(started, c)
		}
		fmt.Printf("started %d\n", len(started))
		if refused != nil {
			fmt.Printf("refused: %v\n", refused)
		}
		os.Stdout.Sync()
		for _, c := range started {
			c.Wait()
		}
		return 0
	}
}

func init() {
	// owner SECONDS: start a contained tree (family SECONDS), print its
	// identity as JSON and die at once, as a crashed owner would: nothing
	// stops or waits for it.
	// family SECONDS: start a child sleeping SECONDS, then sleep as long;
	// write nothing (a dead owner's pipes are broken).
	helpers["family"] = func(args []string) int {
		c := helperCmd("sleep", args[0])
		if err := c.Start(); err != nil {
			return 1
		}
		secs, _ := strconv.Atoi(args[0])
		time.Sleep(time.Duration(secs) * time.Second)
		return 0
	}
	// getenv NAME...: print each NAME=value as the process sees it.
	helpers["getenv"] = func(args []string) int {
		for _, n := range args {
			fmt.Printf("%s=%s\n", n, os.Getenv(n))
		}
		return 0
	}
	helpers["owner"] = func(args []string) int {
		c := corral.Command(os.Args[0], args[0])
		c.Env = append(os.Environ(), helperEnv+"=family")
		tree, err := c.Start(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		json.NewEncoder(os.Stdout).Encode(tree.Identity())
		os.Stdout.Sync()
		os.Exit(0)
		return 0
	}
}
