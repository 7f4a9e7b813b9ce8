package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/daemon"
)

// ops is what the server keeps for its operator: readiness, the counters
// that /metrics shows, and how a SIGTERM drains (drain.go).
type ops struct {
	serving atomic.Bool // Serve's accept loop runs

	recoverFrom  time.Time    // just before the core's Start
	recoveryTook atomic.Int64 // nanoseconds; 0 until start-up recovery is over

	drain time.Duration   // SetDrain
	hurry <-chan struct{} // SetDrain: closed to stop waiting

	refusedStopping atomic.Int64 // connections told the daemon is stopping
	fleet           fleetOps     // histograms and counters by reason: fleetmetrics.go

	// mu guards the counters that follow, keyed by kind (session or
	// oneshot) and outcome.
	mu        sync.Mutex
	commands  map[[2]string]int64 // results, by kind and outcome
	failed    map[string]int64    // results other than exit 0, by kind
	cancelled map[string]int64    // results of a command stopped on request, by kind
	refused   map[string]int64    // calls that ran nothing (an error, no result), by kind
}

// watchRecovery starts timing start-up recovery; call it just before the
// core's Start.
func (s *Server) watchRecovery() {
	s.ops.recoverFrom = time.Now()
	go func() {
		<-s.d.Recovered()
		s.ops.recoveryTook.Store(int64(max(time.Since(s.ops.recoverFrom), 1)))
	}()
}

// count records the outcome of one exec call.
func (s *Server) count(oneshot bool, res *daemon.ExecResult, err error) {
	kind := "session"
	if oneshot {
		kind = "oneshot"
	}
	o := &s.ops
	o.fleet.command(kind, res, err)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.commands == nil {
		o.commands, o.failed, o.cancelled, o.refused = map[[2]string]int64{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
	}
	if res == nil || res.Result == nil {
		if err != nil {
			o.refused[kind]++
		}
		return
	}
	o.commands[[2]string{kind, string(res.Outcome)}]++
	if res.Outcome == corral.OutcomeCancelled {
		o.cancelled[kind]++
	}
	if res.Outcome != corral.OutcomeExited || res.ExitCode != 0 {
		o.failed[kind]++
	}
}

// Health serves a daemon's health, readiness and metrics over HTTP (see
// ServeHealth). Close stops it.
type Health struct {
	hs   *http.Server
	done chan struct{}
	addr net.Addr
}

// Bounds of the health server: probes and scrapes are small requests from
// a few known clients, so it holds little for anyone else.
const (
	healthConns       = 16 // served at once; more wait in the backlog
	healthHeaderBound = 5 * time.Second
	healthIOBound     = 10 * time.Second
	healthIdleBound   = 60 * time.Second
	healthMaxHeader   = 8 << 10
	// aliveBound is how long the core's lock may take to be had before
	// /healthz says the daemon is stuck.
	aliveBound = 2 * time.Second
)

// ServeHealth serves, on ln until Close, for an engine that runs the
// daemon (systemd, Kubernetes, Nomad):
//
//	/healthz  200 while the process is up and its core answers (its lock
//	          can be had within aliveBound), 503 otherwise
//	/readyz   200 once start-up recovery is over and Serve accepts on
//	          every listener; 503 with a JSON reason before, and from the
//	          moment a stop begins (draining)
//	/metrics  the Prometheus text format (version 0.0.4), see writeMetrics
//
// ServeHealth owns ln and closes it.
func (s *Server) ServeHealth(ln net.Listener) *Health {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.writeMetrics(w)
	})
	h := &Health{done: make(chan struct{}), addr: ln.Addr(), hs: &http.Server{Handler: mux,
		ReadHeaderTimeout: healthHeaderBound, ReadTimeout: healthIOBound, WriteTimeout: healthIOBound,
		IdleTimeout: healthIdleBound, MaxHeaderBytes: healthMaxHeader}}
	go func() {
		defer close(h.done)
		err := h.hs.Serve(netutil.LimitListener(ln, healthConns))
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.opsLog().Error("the health server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return h
}

// Addr is the address the health server listens on.
func (h *Health) Addr() net.Addr { return h.addr }

// Close stops the health server: its listener and every connection.
func (h *Health) Close() error {
	err := h.hs.Close()
	<-h.done
	return err
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	alive := make(chan struct{})
	go func() {
		s.d.Recovering() // takes the core's lock
		s.mu.Lock()
		s.mu.Unlock()
		close(alive)
	}()
	select {
	case <-alive:
		writeJSON(w, http.StatusOK, map[string]any{"alive": true, "pid": os.Getpid()})
	case <-time.After(aliveBound):
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"alive": false,
			"reason": fmt.Sprintf("the daemon's core did not answer within %v", aliveBound)})
	}
}

// readiness is whether the daemon takes calls, and if not why.
func (s *Server) readiness() (bool, string) {
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	switch {
	case stopping:
		return false, "draining: the daemon is stopping and takes no new calls"
	case !s.ops.serving.Load():
		return false, "not accepting connections yet"
	}
	select {
	case <-s.d.Recovered():
	default:
		return false, fmt.Sprintf("recovering the recorded sessions (%d left)", s.d.Recovering())
	}
	return true, ""
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if ok, why := s.readiness(); !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": why})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// The metrics are written by hand in the text exposition format rather
// than with github.com/prometheus/client_golang, which the field would
// reach for: its package init (the default registry with its Go and
// process collectors, protobuf descriptors) runs in every corral process,
// not only in the daemon, and measured here it made `corral --version`
// 0.5-0.7 ms (13-17 %) slower: BenchmarkCLISpeed with CORRAL_CLISPEED_OLD,
// version/version-old 1.131 and 1.171 in two runs of 100 ops, 4.50 against
// 3.98 ms. The CLI's whole-process speed is a goal (issue 9); the format
// of a dozen gauges and counters is small and stable
// (https://prometheus.io/docs/instrumenting/exposition_formats/).

// metric is one metric family: its samples are label sets and values.
type metric struct {
	name, typ, help string
	samples         []sample
}

type sample struct {
	labels [][2]string
	value  float64
	// suffix follows the family's name: a histogram's _bucket, _sum and
	// _count.
	suffix string
}

// writeMetrics writes every metric of the daemon in the text format.
func (s *Server) writeMetrics(w io.Writer) {
	var b strings.Builder
	for _, m := range s.metrics() {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", m.name, escapeHelp(m.help), m.name, m.typ)
		for _, smp := range m.samples {
			b.WriteString(m.name)
			b.WriteString(smp.suffix)
			if len(smp.labels) > 0 {
				b.WriteByte('{')
				for i, l := range smp.labels {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "%s=\"%s\"", l[0], escapeLabel(l[1]))
				}
				b.WriteByte('}')
			}
			fmt.Fprintf(&b, " %s\n", formatValue(smp.value))
		}
	}
	io.WriteString(w, b.String())
}

func (s *Server) metrics() []metric {
	peer := daemon.Peer{UID: os.Getuid()}
	byState := map[string]float64{"up": 0, "down": 0, "broken": 0, "recovering": 0}
	busy := 0.0
	list, err := s.d.List(context.Background(), peer)
	if err == nil {
		for _, si := range list {
			byState[si.State]++
			if si.Busy {
				busy++
			}
		}
	}
	sessions := metric{name: "corral_sessions", typ: "gauge", help: "Recorded sessions by state (up, down, broken, recovering)."}
	for _, st := range sortedKeys(byState) {
		sessions.samples = append(sessions.samples, sample{labels: [][2]string{{"state", st}}, value: byState[st]})
	}

	o := &s.ops
	o.mu.Lock()
	commands := metric{name: "corral_commands_total", typ: "counter",
		help: "Commands that ran to a result, by kind (session or oneshot) and outcome."}
	keys := make([][2]string, 0, len(o.commands))
	for k := range o.commands {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	for _, k := range keys {
		commands.samples = append(commands.samples, sample{labels: [][2]string{{"kind", k[0]}, {"outcome", k[1]}}, value: float64(o.commands[k])})
	}
	byKind := func(name, help string, m map[string]int64) metric {
		out := metric{name: name, typ: "counter", help: help}
		for _, kind := range []string{"oneshot", "session"} {
			out.samples = append(out.samples, sample{labels: [][2]string{{"kind", kind}}, value: float64(m[kind])})
		}
		return out
	}
	failed := byKind("corral_commands_failed_total", "Commands whose result was not exit 0, by kind.", o.failed)
	cancelled := byKind("corral_commands_cancelled_total", "Commands stopped at their client's request (cancel, kill, disconnect), by kind.", o.cancelled)
	refused := byKind("corral_commands_refused_total", "Exec calls that ran nothing (a bad request, a broken or recovering session, a stopping daemon), by kind.", o.refused)
	o.mu.Unlock()

	s.mu.Lock()
	conns, stopping := len(s.conns), s.stopping
	s.mu.Unlock()
	ready, _ := s.readiness()
	recovery := math.NaN()
	if ns := o.recoveryTook.Load(); ns > 0 {
		recovery = time.Duration(ns).Seconds()
	}
	version, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				rev = st.Value
			}
		}
	}
	one := func(name, typ, help string, v float64) metric {
		return metric{name: name, typ: typ, help: help, samples: []sample{{value: v}}}
	}
	return append([]metric{
		{name: "corral_build_info", typ: "gauge", help: "The daemon's build: always 1.",
			samples: []sample{{labels: [][2]string{{"version", version}, {"revision", rev}, {"goversion", runtime.Version()}}, value: 1}}},
		one("corral_start_time_seconds", "gauge", "When the daemon started, in seconds since the epoch.", float64(s.d.Started().UnixNano())/1e9),
		one("corral_ready", "gauge", "1 when the daemon takes calls (as /readyz), else 0.", b2f(ready)),
		one("corral_draining", "gauge", "1 from the moment the daemon began to stop.", b2f(stopping)),
		sessions,
		one("corral_sessions_busy", "gauge", "Sessions running a command now.", busy),
		commands, failed, cancelled, refused,
		one("corral_connections_open", "gauge", "Client connections open on the daemon's socket.", float64(conns)),
		one("corral_connections_refused_stopping_total", "counter", "Connections told that the daemon is stopping.", float64(o.refusedStopping.Load())),
		one("corral_recovery_seconds", "gauge", "How long start-up recovery of the recorded sessions took (NaN until it is over).", recovery),
		one("corral_orphans_reaped_total", "counter", "Orphaned trees (oneshots of a daemon that died, corral runs whose owner was killed) killed.", float64(s.d.OrphansReaped())),
	}, s.fleetMetrics(len(list))...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func sortedKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// formatValue writes a sample value as the text format spells it.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%d", int64(v))
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
