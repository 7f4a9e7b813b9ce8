package session

import (
	"bytes"
	"strconv"
	"sync"
	"time"

	"github.com/corral-dev/corral/internal/output"
)

// sink receives one command's output from the shell's stdout and stderr:
// it finds the marker that ends it on each stream, and hands the command's
// share to an output.Meter (the run layer's accounting), which passes it
// to the caller's writers, counts and times it and enforces the output
// limit. The marker is the
// prefix "\037corral:NONCE " and a trailer, "RC FLAGS PWD\0" (plus the exported
// environment and "\0" when tracked) on stdout, "RC\037" on stderr. Bytes
// after a marker belong to no command.
type sink struct {
	prefix []byte
	// trace, if set, is how xtrace shows the call of corral's function on
	// stderr ("FN NONCE "): a command that turned xtrace on gets the
	// trace of that call, and of the function's first commands, before
	// the stderr marker. Stream 1 ends where the trace starts, with the
	// PS4 prefix on its line if it looks like one (see ps4Like), and
	// what follows is skipped up to the marker.
	trace []byte
	// echo, if set, is what the shell echoes of corral's command line on
	// stderr before anything else (set -v under dash: echoedLine); the
	// command gets echoAs in its place.
	echo, echoAs []byte
	trackEnv     bool
	start        time.Time
	out          *output.Meter
	limitHit     <-chan struct{}  // out's
	found        [2]chan struct{} // closed when stream i's marker is complete
	// pipes are the command's own stdout and stderr FIFOs (none for
	// corral's own commands), read besides the session's pipes.
	pipes [2]*cmdPipe

	// mu guards the fields that follow, and orders what is handed to out.
	mu      sync.Mutex
	echoGot []byte    // what stream 1 gave so far, while it may be echo
	carry   [2][]byte // a tail that may be the start of the prefix
	carryAt [2]time.Time
	trailer [2][]byte // bytes after the prefix, until the terminator
	state   [2]int    // searching, skipping, inTrailer, done
	rc      [2]int
	haveRC  [2]bool
	cwd     string
	flags   string // the shell's $-
	evalFn  bool   // the shell reported a function named eval
	execFn  bool   // and one named exec
	env     []string
	haveCwd bool
	closed  bool
}

const (
	searching = iota
	skipping  // stream 1 after corral's traced call, until the marker
	inTrailer
	done
)

// maxTrailer bounds a trailer (the exported environment is the large part).
const maxTrailer = 16 << 20

func newSink(nonce string, start time.Time, opts Options, trackEnv bool) *sink {
	out := output.New(start, opts.MaxOutput, opts.Stdout, opts.Stderr)
	return &sink{
		prefix:   []byte("\x1fcorral:" + nonce + " "),
		trackEnv: trackEnv,
		start:    start,
		out:      out,
		limitHit: out.LimitHit(),
		found:    [2]chan struct{}{make(chan struct{}), make(chan struct{})},
	}
}

// feed takes bytes read from stream i at time at.
func (k *sink) feed(i int, b []byte, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.closed || k.state[i] == done:
		return
	case k.state[i] == inTrailer:
		k.collect(i, b)
		return
	}
	if i == 1 && k.echo != nil {
		k.echoGot = append(k.echoGot, b...)
		n := min(len(k.echoGot), len(k.echo))
		switch {
		case !bytes.Equal(k.echoGot[:n], k.echo[:n]):
			b = k.echoGot // not the echo: all of it is the command's
		case n < len(k.echo):
			return // so far the echo: wait for the rest
		default:
			k.emit(1, k.echoAs, at)
			b = k.echoGot[n:]
		}
		k.echo, k.echoGot = nil, nil
		if len(b) == 0 {
			return
		}
	}
	data := b
	dataAt := at
	if len(k.carry[i]) > 0 {
		data = append(k.carry[i], b...)
		dataAt = k.carryAt[i]
		k.carry[i] = nil
	}
	if k.state[i] == skipping {
		k.skip(i, data, at)
		return
	}
	idx := bytes.Index(data, k.prefix)
	if i == 1 && k.trace != nil {
		if t := bytes.Index(data, k.trace); t >= 0 && (idx < 0 || t < idx) {
			cut := t
			if ls := bytes.LastIndexByte(data[:t], '\n') + 1; ps4Like(data[ls:t]) {
				cut = ls
			}
			k.emit(i, data[:cut], dataAt)
			k.state[i] = skipping
			k.skip(i, data[t+len(k.trace):], at)
			return
		}
	}
	if idx >= 0 {
		k.emit(i, data[:idx], dataAt)
		k.state[i] = inTrailer
		k.collect(i, data[idx+len(k.prefix):])
		return
	}
	// Hold back a tail that could be the start of the prefix (or of the
	// trace), split across two reads.
	keep := tailKeep(data, k.prefix)
	if i == 1 && k.trace != nil {
		// and the PS4 the trace may start with, whole or in part
		kt := tailKeep(data, k.trace)
		end := len(data) - kt
		ls := bytes.LastIndexByte(data[:end], '\n') + 1
		if kt > 0 && ps4Like(data[ls:end]) || kt == 0 && (ps4Like(data[ls:]) || ps4Like(append(data[ls:len(data):len(data)], ' '))) {
			kt = len(data) - ls
		}
		keep = max(keep, kt)
	}
	k.emit(i, data[:len(data)-keep], dataAt)
	if keep > 0 {
		k.carry[i] = append([]byte(nil), data[len(data)-keep:]...)
		k.carryAt[i] = at
	}
}

// skip drops stream i's bytes up to the marker's prefix, then collects
// the trailer.
func (k *sink) skip(i int, data []byte, at time.Time) {
	if idx := bytes.Index(data, k.prefix); idx >= 0 {
		k.state[i] = inTrailer
		k.collect(i, data[idx+len(k.prefix):])
		return
	}
	if keep := tailKeep(data, k.prefix); keep > 0 {
		k.carry[i] = append([]byte(nil), data[len(data)-keep:]...)
		k.carryAt[i] = at
	}
}

// tailKeep is the length of the longest tail of data that is a proper
// prefix of p.
func tailKeep(data, p []byte) int {
	keep := min(len(p)-1, len(data))
	for keep > 0 && !bytes.HasPrefix(p, data[len(data)-keep:]) {
		keep--
	}
	return max(keep, 0)
}

// ps4Like reports whether b, the start of the line on which xtrace shows
// corral's call, is what the shells print for the default PS4: its first
// character, repeated once per level of eval or subshell, and a space.
// Anything else is the command's own output and is kept.
func ps4Like(b []byte) bool {
	if len(b) < 2 || len(b) > 32 || b[len(b)-1] != ' ' {
		return false
	}
	for _, c := range b[:len(b)-1] {
		if c != b[0] {
			return false
		}
	}
	return true
}

// collect gathers stream i's trailer and, once it is complete, parses it
// and closes found[i]. What follows the trailer is dropped.
func (k *sink) collect(i int, b []byte) {
	k.trailer[i] = append(k.trailer[i], b...)
	t := k.trailer[i]
	var body []byte
	if i == 0 {
		need := 1
		if k.trackEnv {
			need = 2
		}
		end := -1
		for n, off := 0, 0; n < need; n++ {
			j := bytes.IndexByte(t[off:], 0)
			if j < 0 {
				end = -1
				break
			}
			end = off + j
			off = end + 1
		}
		if end < 0 {
			if len(t) > maxTrailer {
				k.finish(i) // garbage: give up on this stream's state
			}
			return
		}
		body = t[:end]
		head, rest, _ := bytes.Cut(body, []byte{0})
		rcs, fields, _ := bytes.Cut(head, []byte{' '})
		flags, cwd, _ := bytes.Cut(fields, []byte{' '})
		if c, ok := bytes.CutPrefix(cwd, []byte("eval\n")); ok {
			k.evalFn, cwd = true, c
		}
		if c, ok := bytes.CutPrefix(cwd, []byte("exec\n")); ok {
			k.execFn, cwd = true, c
		}
		if rc, err := strconv.Atoi(string(rcs)); err == nil {
			k.rc[0], k.haveRC[0] = rc, true
			k.cwd, k.flags, k.haveCwd = string(cwd), string(flags), true
		}
		if k.trackEnv {
			k.env = parseExports(string(rest))
		}
	} else {
		j := bytes.IndexByte(t, 0x1f)
		if j < 0 {
			if len(t) > maxTrailer {
				k.finish(i)
			}
			return
		}
		if rc, err := strconv.Atoi(string(t[:j])); err == nil {
			k.rc[1], k.haveRC[1] = rc, true
		}
	}
	k.finish(i)
}

func (k *sink) finish(i int) {
	k.state[i] = done
	k.trailer[i] = nil
	close(k.found[i])
}

// exitCode is the command's exit status as the shell reported it.
func (k *sink) exitCode() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.haveRC[0]:
		return k.rc[0]
	case k.haveRC[1]:
		return k.rc[1]
	}
	return -1
}

// shellState is the shell's working directory (and exported environment,
// if tracked) after the command.
func (k *sink) shellState() (cwd string, env []string, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cwd, k.env, k.haveCwd
}

// shellFlags is the shell's $- after the command, and whether it reported
// a function named eval.
func (k *sink) shellFlags() (flags string, evalFn bool, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.flags, k.evalFn, k.haveCwd
}

// emit delivers p (first read at time at) within the output limit.
func (k *sink) emit(i int, p []byte, at time.Time) { k.out.Deliver(i, p, at) }

// waitMarkers waits up to d for the markers on both streams.
func (k *sink) waitMarkers(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for i := range k.found {
		select {
		case <-k.found[i]:
		case <-t.C:
			return false
		}
	}
	return true
}

// taking reports whether stream i still takes the command's output: its
// marker has not begun, and the sink is open.
func (k *sink) taking(i int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.closed && (k.state[i] == searching || k.state[i] == skipping)
}

// close ends the sink: nothing is written to the caller's writers after it
// returns. A held-back tail that turned out not to be a marker is delivered.
func (k *sink) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.echoGot) > 0 {
		k.emit(1, k.echoGot, k.start) // cut short: what came, as it came
		k.echo, k.echoGot = nil, nil
	}
	for i := range k.carry {
		if k.state[i] == searching && len(k.carry[i]) > 0 {
			k.emit(i, k.carry[i], k.carryAt[i])
		}
		k.carry[i] = nil
	}
	k.closed = true
}
