package corral

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/corral-dev/corral/internal/output"
)

// relay copies the tree's stdout and stderr pipes to the caller's writers
// through an output.Meter, which counts the bytes, times the first one and
// enforces the output limit. It reads with its own loop (not io.Copy), so
// a writer's ReadFrom can never bypass the accounting.
type relay struct {
	m *output.Meter
	// limitHit is closed the first time output passes the limit.
	limitHit <-chan struct{}
	wg       sync.WaitGroup
	done     chan struct{} // closed when both streams reached EOF or were cut
	streams  [2]*stream
}

// relayBufs recycles the read buffers: large enough that a fast writer is
// read in few wake-ups, pooled so that a short command does not pay for
// allocating them.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

type stream struct {
	i int      // 0: stdout, 1: stderr
	r *os.File // read end; the relay's goroutine owns it and closes it
}

func newRelay(start time.Time, limit int64, stdout, stderr *os.File, wout, werr io.Writer) *relay {
	m := output.New(start, limit, wout, werr)
	rl := &relay{m: m, limitHit: m.LimitHit(), done: make(chan struct{})}
	rl.streams[0] = &stream{i: 0, r: stdout}
	rl.streams[1] = &stream{i: 1, r: stderr}
	for _, s := range rl.streams {
		if s.r == nil {
			continue // an adopted tree, or a file handed to the root: not ours
		}
		rl.wg.Add(1)
		go rl.copy(s)
	}
	go func() { rl.wg.Wait(); close(rl.done) }()
	return rl
}

func (rl *relay) copy(s *stream) {
	defer rl.wg.Done()
	defer s.r.Close()
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, err := s.r.Read(buf)
		if n > 0 {
			if _, werr := rl.m.Deliver(s.i, buf[:n], time.Now()); werr != nil {
				// Stop reading, as a direct pipe would: the
				// command's next write fails (EPIPE or SIGPIPE).
				return
			}
		}
		if err != nil {
			return
		}
	}
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

func (rl *relay) firstOutput() time.Duration { return rl.m.FirstOutput() }

func (rl *relay) outputError() error {
	if err := rl.m.WriteErr(); !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}
