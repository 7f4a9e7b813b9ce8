package testproc

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a test may read while other goroutines
// write to it (a relay, a daemon's log).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
