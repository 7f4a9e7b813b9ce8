package corral

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// relay copies the tree's stdout and stderr pipes to the caller's writers,
// counting bytes, timing the first byte and enforcing the output limit. It
// reads with its own loop (not io.Copy), so a writer's ReadFrom can never
// bypass the accounting.
type relay struct {
	start time.Time
	limit int64 // 0: none
	// first is the time of the first byte since start, plus one; 0: none.
	first atomic.Int64
	total atomic.Int64
	// limitHit is closed the first time output passes limit.
	limitHit  chan struct{}
	limitOnce sync.Once
	wg        sync.WaitGroup
	done      chan struct{} // closed when both streams reached EOF or were cut
	streams   [2]*stream
	errMu     sync.Mutex
	writeErr  error
}

// relayBufs recycles the read buffers: large enough that a fast writer is
// read in few wake-ups, pooled so that a short command does not pay for
// allocating them.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

type stream struct {
	r *os.File // read end; the relay's goroutine owns it and closes it
	w io.Writer
	n atomic.Int64
}

func newRelay(start time.Time, limit int64, stdout, stderr *os.File, wout, werr io.Writer) *relay {
	rl := &relay{start: start, limit: limit, limitHit: make(chan struct{}), done: make(chan struct{})}
	rl.streams[0] = &stream{r: stdout, w: wout}
	rl.streams[1] = &stream{r: stderr, w: werr}
	// The two streams may share one writer (or two that share state), so
	// writes are always serialised. Comparing the writers instead would
	// panic for writers of uncomparable types (a func, a slice).
	shared := &sync.Mutex{}
	for _, s := range rl.streams {
		if s.r == nil {
			continue // an adopted tree: its output is not ours
		}
		rl.wg.Add(1)
		go rl.copy(s, shared)
	}
	go func() { rl.wg.Wait(); close(rl.done) }()
	return rl
}

func (rl *relay) copy(s *stream, mu *sync.Mutex) {
	defer rl.wg.Done()
	defer s.r.Close()
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, err := s.r.Read(buf)
		if n > 0 {
			rl.first.CompareAndSwap(0, int64(time.Since(rl.start))+1)
			keep := rl.admit(n)
			if keep > 0 && s.w != nil {
				mu.Lock()
				_, werr := s.w.Write(buf[:keep])
				mu.Unlock()
				if werr != nil {
					// Stop reading, as a direct pipe would: the
					// command's next write fails (EPIPE or SIGPIPE).
					rl.errMu.Lock()
					if rl.writeErr == nil {
						rl.writeErr = werr
					}
					rl.errMu.Unlock()
					s.n.Add(int64(keep))
					return
				}
			}
			s.n.Add(int64(keep))
		}
		if err != nil {
			return
		}
	}
}

// admit reserves up to n bytes of the output budget and returns how many
// may be delivered; it closes limitHit when the budget is exceeded.
func (rl *relay) admit(n int) int {
	if rl.limit <= 0 {
		rl.total.Add(int64(n))
		return n
	}
	after := rl.total.Add(int64(n))
	before := after - int64(n)
	if after <= rl.limit {
		return n
	}
	rl.limitOnce.Do(func() { close(rl.limitHit) })
	if before >= rl.limit {
		return 0
	}
	return int(rl.limit - before)
}

// eofWithin reports whether both streams reach end of file within d; stop
// ends the wait early.
func (rl *relay) eofWithin(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rl.done:
		return true
	case <-t.C:
	case <-stop:
	}
	return false
}

// cut stops reading: pending reads return at once, and the streams count as
// ended.
func (rl *relay) cut() {
	for _, s := range rl.streams {
		if s.r != nil {
			s.r.SetReadDeadline(time.Now())
		}
	}
	<-rl.done
}

func (rl *relay) firstOutput() time.Duration {
	v := rl.first.Load()
	if v == 0 {
		return -1
	}
	return time.Duration(v - 1)
}

func (rl *relay) outputError() error {
	rl.errMu.Lock()
	defer rl.errMu.Unlock()
	if errors.Is(rl.writeErr, os.ErrDeadlineExceeded) {
		return nil
	}
	return rl.writeErr
}
