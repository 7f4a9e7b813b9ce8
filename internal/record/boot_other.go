//go:build !linux

package record

import "time"

// bootTime is zero where corral does not know when the boot began: no
// record is then taken for one of an earlier boot, and an unreadable one
// stays reported.
func bootTime() time.Time { return time.Time{} }
