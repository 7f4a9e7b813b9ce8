//go:build !linux

package holder

import "os"

// readBatch is a plain read where the PTY is not on the poller.
func readBatch(f *os.File, buf []byte) (int, error) { return f.Read(buf) }
