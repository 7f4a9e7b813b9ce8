package server

import (
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/tlsdir"
)

// The metrics a fleet's operator asks for beyond the counts of health.go
// (issue 13): how long commands take, how long a stop takes to leave no
// tree, how much output goes out, what was refused and why, the core's
// take-overs and resets, sessions by kind. Written by hand, as the rest
// (see health.go for why not client_golang).

// Why a connection (or a call) was refused: the reason label of
// corral_connections_rejected_total.
const (
	rejectPlaintext        = "plaintext"
	rejectNoCertificate    = "no_certificate"
	rejectUnknownCA        = "unknown_ca"
	rejectExpired          = "expired"
	rejectRevoked          = "revoked"
	rejectBadCertificate   = "bad_certificate"
	rejectCRLUnusable      = "crl_unusable"
	rejectHandshakeFailed  = "handshake_failed"
	rejectHandshakeTimeout = "handshake_timeout"
	rejectTooMany          = "too_many"
	rejectStopping         = "stopping"
	rejectReadOnly         = "read_only"
	rejectOtherUID         = "other_uid"
)

// rejectReasons are every reason label, each shown from 0 on.
var rejectReasons = []string{rejectPlaintext, rejectNoCertificate, rejectUnknownCA, rejectExpired, rejectRevoked,
	rejectBadCertificate, rejectCRLUnusable, rejectHandshakeFailed, rejectHandshakeTimeout, rejectTooMany,
	rejectStopping, rejectReadOnly, rejectOtherUID}

// rejectLabel is the reason label of a TLS refusal.
func rejectLabel(r tlsdir.Reason) string {
	switch r {
	case tlsdir.ReasonPlaintext:
		return rejectPlaintext
	case tlsdir.ReasonNoCertificate:
		return rejectNoCertificate
	case tlsdir.ReasonUnknownCA:
		return rejectUnknownCA
	case tlsdir.ReasonExpired:
		return rejectExpired
	case tlsdir.ReasonRevoked:
		return rejectRevoked
	case tlsdir.ReasonBadCert:
		return rejectBadCertificate
	case tlsdir.ReasonCRLUnusable:
		return rejectCRLUnusable
	}
	return rejectHandshakeFailed
}

// Histogram buckets, in seconds. A command lasts from a millisecond (a
// warm `true`) to hours (a test suite); a stop from a millisecond (a
// tree that dies of SIGTERM) to its grace and then some.
var (
	durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600}
	stopBuckets     = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// histogram counts observations per bucket (not cumulative: the text
// format's cumulative counts are summed when written).
type histogram struct {
	counts []uint64 // len(bounds)+1: the last is past every bound
	sum    float64
	n      uint64
}

func (h *histogram) observe(bounds []float64, v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(bounds)+1)
	}
	h.counts[sort.SearchFloat64s(bounds, v)]++ // the first bound >= v
	h.sum += v
	h.n++
}

// fleetOps holds those metrics.
type fleetOps struct {
	// mu guards the fields that follow.
	mu       sync.Mutex
	duration map[string]*histogram // by kind
	stop     map[string]*histogram // by why: timeout, client
	output   map[[2]string]int64   // by kind and stream
	rejected map[string]int64      // by reason

	jobs atomic.Int64 // detached jobs started
}

func (f *fleetOps) reject(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rejected == nil {
		f.rejected = map[string]int64{}
	}
	f.rejected[reason]++
}

// refusedCall counts a call refused for its identity: a read-only one
// that asked to run, kill or stop (other peers are refused at the
// handshake).
func (f *fleetOps) refusedCall(err error) {
	if errors.Is(err, daemon.ErrPermission) {
		f.reject(rejectReadOnly)
	}
}

// command records one exec call's result: its duration and output.
func (f *fleetOps) command(kind string, res *daemon.ExecResult, err error) {
	if res == nil || res.Result == nil {
		f.refusedCall(err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.duration == nil {
		f.duration, f.output = map[string]*histogram{}, map[[2]string]int64{}
	}
	h := f.duration[kind]
	if h == nil {
		h = &histogram{}
		f.duration[kind] = h
	}
	h.observe(durationBuckets, res.Duration.Seconds())
	f.output[[2]string{kind, "stdout"}] += res.StdoutBytes
	f.output[[2]string{kind, "stderr"}] += res.StderrBytes
}

// stopClock times a command's stop: from the daemon's decision (a
// client's cancel, kill or disconnect, a send stall) to its tree gone.
type stopClock struct{ at atomic.Int64 }

// wrap returns cancel, which also starts the clock the first time it is
// given a cause.
func (c *stopClock) wrap(cancel func(error)) func(error) {
	return func(cause error) {
		if cause != nil {
			c.at.CompareAndSwap(0, time.Now().UnixNano())
		}
		cancel(cause)
	}
}

// stopped records how long a stopped command's tree took to be gone: a
// timeout's, from the moment the timeout passed; a client's, from its
// stop (clock).
func (f *fleetOps) stopped(res *daemon.ExecResult, timeout time.Duration, clock *stopClock) {
	if res == nil || res.Result == nil {
		return
	}
	why, took := "", time.Duration(0)
	switch {
	case res.Outcome == corral.OutcomeTimeout && timeout > 0:
		why, took = "timeout", max(res.Duration-timeout, 0)
	case res.Outcome == corral.OutcomeCancelled && clock != nil && clock.at.Load() != 0:
		why, took = "client", time.Since(time.Unix(0, clock.at.Load()))
	default:
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stop == nil {
		f.stop = map[string]*histogram{}
	}
	h := f.stop[why]
	if h == nil {
		h = &histogram{}
		f.stop[why] = h
	}
	h.observe(stopBuckets, took.Seconds())
}

// histogramMetric is a histogram family of hs, one series per value of
// label.
func histogramMetric(name, help, label string, values []string, bounds []float64, hs map[string]*histogram) metric {
	m := metric{name: name, typ: "histogram", help: help}
	for _, v := range values {
		h := hs[v]
		if h == nil {
			h = &histogram{}
		}
		cum := uint64(0)
		for i, b := range bounds {
			if h.counts != nil {
				cum += h.counts[i]
			}
			m.samples = append(m.samples, sample{suffix: "_bucket", labels: [][2]string{{label, v}, {"le", strconv.FormatFloat(b, 'g', -1, 64)}}, value: float64(cum)})
		}
		m.samples = append(m.samples,
			sample{suffix: "_bucket", labels: [][2]string{{label, v}, {"le", "+Inf"}}, value: float64(h.n)},
			sample{suffix: "_sum", labels: [][2]string{{label, v}}, value: h.sum},
			sample{suffix: "_count", labels: [][2]string{{label, v}}, value: float64(h.n)})
	}
	return m
}

// fleetMetrics are the families of this file; sessions is how many
// sessions the daemon has (all exec sessions today).
func (s *Server) fleetMetrics(sessions int) []metric {
	f := &s.ops.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	duration := histogramMetric("corral_command_duration_seconds", "How long commands ran, from start to their tree gone, by kind (session or oneshot).",
		"kind", []string{"oneshot", "session"}, durationBuckets, f.duration)
	stop := histogramMetric("corral_kill_latency_seconds", "From the decision to stop a command (its timeout passed, or its client cancelled, killed, went away or stopped reading) to its whole tree gone, by why (timeout, client).",
		"why", []string{"client", "timeout"}, stopBuckets, f.stop)
	output := metric{name: "corral_output_bytes_total", typ: "counter", help: "Bytes of output commands wrote, by kind and stream (merged output counts as stdout)."}
	for _, kind := range []string{"oneshot", "session"} {
		for _, stream := range []string{"stderr", "stdout"} {
			output.samples = append(output.samples, sample{labels: [][2]string{{"kind", kind}, {"stream", stream}}, value: float64(f.output[[2]string{kind, stream}])})
		}
	}
	rejected := metric{name: "corral_connections_rejected_total", typ: "counter",
		help: "Connections refused (and calls refused for their identity: read_only), by reason."}
	reasons := slices.Clone(rejectReasons)
	slices.Sort(reasons)
	for _, r := range reasons {
		rejected.samples = append(rejected.samples, sample{labels: [][2]string{{"reason", r}}, value: float64(f.rejected[r])})
	}
	takeovers, resets := s.d.Takeovers(), s.d.Resets()
	one := func(name, typ, help string, v float64) metric {
		return metric{name: name, typ: typ, help: help, samples: []sample{{value: v}}}
	}
	s.jobs.mu.Lock()
	kept := len(s.jobs.byID)
	s.jobs.mu.Unlock()
	return []metric{duration, stop, output, rejected,
		one("corral_takeovers_total", "counter", "Sessions' shells this daemon took over from an earlier daemon.", float64(takeovers)),
		one("corral_session_resets_total", "counter", "Session shells discarded for a fresh one (a timeout, a cancel, a command that ended the shell).", float64(resets)),
		{name: "corral_sessions_by_kind", typ: "gauge", help: "Recorded sessions by kind (exec: shell sessions).",
			samples: []sample{{labels: [][2]string{{"kind", "exec"}}, value: float64(sessions)}}},
		one("corral_detached_jobs", "gauge", "Detached jobs the daemon keeps (running or finished).", float64(kept)),
		one("corral_detached_jobs_started_total", "counter", "Exec calls that asked to detach on disconnect.", float64(f.jobs.Load())),
	}
}
