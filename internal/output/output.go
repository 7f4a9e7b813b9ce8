// Package output counts, times and limits a run's output on its way to the
// caller's writers. It is the one accounting of output in corral: the run
// layer's relay feeds it what it reads from a tree's pipes, and a session
// feeds it each command's share of what its shell writes (the output up to
// the command's marker), so that both report bytes, the time of the first
// byte, the output limit and a failing writer the same way.
package output

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Meter accounts for the two streams (0: stdout, 1: stderr) of one run.
// Its methods are safe for concurrent use; writes to the writers are
// serialised (the two streams may share one writer, or two that share
// state, and comparing writers would panic for uncomparable types).
type Meter struct {
	start time.Time
	limit int64 // 0: none
	// first is the time of the first byte since start, plus one; 0: none.
	first atomic.Int64
	total atomic.Int64
	n     [2]atomic.Int64

	limitHit  chan struct{}
	limitOnce sync.Once

	// mu serialises writes to w and guards the fields that follow.
	mu     sync.Mutex
	w      [2]io.Writer
	failed [2]bool // the stream's writer failed: nothing more goes to it
	werr   error   // the first writer's error
}

// New returns a Meter for a run that started at start, with limit bytes
// of stdout+stderr allowed (0: no limit), delivering to stdout and stderr
// (nil discards; the bytes are still counted and timed).
func New(start time.Time, limit int64, stdout, stderr io.Writer) *Meter {
	return &Meter{start: start, limit: limit, limitHit: make(chan struct{}), w: [2]io.Writer{stdout, stderr}}
}

// Deliver hands p, first read from stream i at time at, to the stream's
// writer, within the output limit: it returns how many bytes of p were
// admitted (and counted) and the error of the writer, if writing failed
// now. Bytes past the limit are dropped, and LimitHit is closed. Once a
// stream's writer has failed, nothing more is written to it; what is
// admitted is still counted.
func (m *Meter) Deliver(i int, p []byte, at time.Time) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	m.first.CompareAndSwap(0, int64(at.Sub(m.start))+1)
	keep := m.admit(len(p))
	var err error
	if keep > 0 && m.w[i] != nil {
		m.mu.Lock()
		if !m.failed[i] {
			if _, err = m.w[i].Write(p[:keep]); err != nil {
				m.failed[i] = true
				if m.werr == nil {
					m.werr = err
				}
			}
		}
		m.mu.Unlock()
	}
	m.n[i].Add(int64(keep))
	return keep, err
}

// admit reserves up to n bytes of the output budget and returns how many
// may be delivered; it closes limitHit when the budget is exceeded.
func (m *Meter) admit(n int) int {
	after := m.total.Add(int64(n))
	if m.limit <= 0 || after <= m.limit {
		return n
	}
	m.limitOnce.Do(func() { close(m.limitHit) })
	before := after - int64(n)
	if before >= m.limit {
		return 0
	}
	return int(m.limit - before)
}

// LimitHit is closed the first time the output passes the limit.
func (m *Meter) LimitHit() <-chan struct{} { return m.limitHit }

// Bytes is how many bytes of stream i were admitted.
func (m *Meter) Bytes(i int) int64 { return m.n[i].Load() }

// FirstOutput is the time from start to the first byte of either stream,
// -1 if there was none.
func (m *Meter) FirstOutput() time.Duration {
	v := m.first.Load()
	if v == 0 {
		return -1
	}
	return time.Duration(v - 1)
}

// WriteErr is the first error of a writer, nil if none failed.
func (m *Meter) WriteErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.werr
}
