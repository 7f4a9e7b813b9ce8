package holder

import (
	"os"

	"github.com/corral-dev/corral/internal/proc"
)

// selfStart is this process's start time (field 22 of /proc/self/stat)
// and the boot's id: with the pid they name the holder for ever.
func selfStart() (uint64, string) {
	var start uint64
	if st, err := proc.ReadStat(os.Getpid()); err == nil {
		start = st.StartTime
	}
	boot, _ := proc.BootID()
	return start, boot
}
