package corral_test

import (
	"fmt"
	"os"
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
