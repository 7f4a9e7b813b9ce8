package session

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// record is a command's completion as the shell reported it.
type record struct {
	nonce  string
	rc     int
	cwd    string
	hasEnv bool
	env    []string
}

// sink receives one command's output from the shell's stdout and stderr:
// it passes it to the caller's writers, counts and times it, enforces the
// output limit, and finds the marker with the command's nonce that ends it
// on each stream. Bytes after a marker belong to no command.
type sink struct {
	nonce    string
	marker   []byte
	start    time.Time
	limit    int64
	status   chan record // the completion record, from the status reader
	limitHit chan struct{}
	found    [2]chan struct{} // closed when the marker is seen on stream i
	n        [2]atomic.Int64
	first    atomic.Int64 // time of first output since start, plus one

	// mu guards the fields that follow, and serialises writes to w.
	mu      sync.Mutex
	w       [2]io.Writer
	carry   [2][]byte // a tail that may be the start of a marker
	carryAt [2]time.Time
	done    [2]bool
	total   int64
	hit     bool
	closed  bool
	werr    error
}

func newSink(nonce string, start time.Time, opts Options) *sink {
	return &sink{
		nonce:    nonce,
		marker:   []byte("\x1fcorral:" + nonce + "\x1f"),
		start:    start,
		limit:    opts.MaxOutput,
		status:   make(chan record, 1),
		limitHit: make(chan struct{}),
		found:    [2]chan struct{}{make(chan struct{}), make(chan struct{})},
		w:        [2]io.Writer{opts.Stdout, opts.Stderr},
	}
}

// feed takes bytes read from stream i at time at.
func (k *sink) feed(i int, b []byte, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.done[i] {
		return
	}
	data := b
	dataAt := at
	if len(k.carry[i]) > 0 {
		data = append(k.carry[i], b...)
		dataAt = k.carryAt[i]
		k.carry[i] = nil
	}
	if idx := bytes.Index(data, k.marker); idx >= 0 {
		k.emit(i, data[:idx], dataAt)
		k.done[i] = true
		close(k.found[i])
		return
	}
	// Hold back a tail that could be the start of a marker split across
	// two reads.
	keep := min(len(k.marker)-1, len(data))
	for keep > 0 && !bytes.HasPrefix(k.marker, data[len(data)-keep:]) {
		keep--
	}
	k.emit(i, data[:len(data)-keep], dataAt)
	if keep > 0 {
		k.carry[i] = append([]byte(nil), data[len(data)-keep:]...)
		k.carryAt[i] = at
	}
}

// emit delivers p (first read at time at) within the output limit.
func (k *sink) emit(i int, p []byte, at time.Time) {
	if len(p) == 0 {
		return
	}
	k.first.CompareAndSwap(0, int64(at.Sub(k.start))+1)
	if k.limit > 0 {
		room := k.limit - k.total
		if int64(len(p)) > room {
			p = p[:max(room, 0)]
			if !k.hit {
				k.hit = true
				close(k.limitHit)
			}
		}
	}
	k.total += int64(len(p))
	k.n[i].Add(int64(len(p)))
	if w := k.w[i]; w != nil && len(p) > 0 && k.werr == nil {
		if _, err := w.Write(p); err != nil {
			k.werr = err
		}
	}
}

// waitMarkers waits up to d for the markers on both streams; gone ends the
// wait early.
func (k *sink) waitMarkers(d time.Duration, gone <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for i := range k.found {
		select {
		case <-k.found[i]:
		case <-t.C:
			return false
		case <-gone:
			// The shell died right after the command: what it wrote
			// is in the pipes; give the readers the rest of d.
			select {
			case <-k.found[i]:
			case <-t.C:
				return false
			}
		}
	}
	return true
}

// close ends the sink: nothing is written to the caller's writers after it
// returns. A held-back tail that turned out not to be a marker is delivered.
func (k *sink) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.carry {
		if !k.done[i] && len(k.carry[i]) > 0 {
			k.emit(i, k.carry[i], k.carryAt[i])
		}
		k.carry[i] = nil
	}
	k.closed = true
}

func (k *sink) firstOutput() time.Duration {
	v := k.first.Load()
	if v == 0 {
		return -1
	}
	return time.Duration(v - 1)
}

func (k *sink) writeErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.werr
}
