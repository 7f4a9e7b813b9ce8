package corral_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/windows"
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
