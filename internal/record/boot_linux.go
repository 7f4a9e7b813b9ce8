package record

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"
)

// bootTime is when this boot began: btime of /proc/stat (whole seconds),
// or zero if it cannot be read.
var bootTime = sync.OnceValue(func() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			if s, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				return time.Unix(s, 0)
			}
		}
	}
	return time.Time{}
})
