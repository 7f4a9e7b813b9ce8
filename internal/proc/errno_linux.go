package proc

import "syscall"

// errESRCH is what reads of /proc/PID files return once PID has gone.
var errESRCH = syscall.ESRCH
