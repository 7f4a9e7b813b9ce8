//go:build linux

package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tlsdir"
	"github.com/corral-dev/corral/internal/wire"
)

// scrape GETs /metrics of h and parses it with Prometheus' own parser of
// the text format, then checks what that parser lets through: every
// family has HELP and TYPE, no series is given twice, and every
// histogram's buckets are cumulative, end with +Inf, and +Inf is _count.
// It returns every sample by its series (name{labels}, labels sorted,
// histograms as _bucket, _sum and _count series).
func scrape(t *testing.T, h *server.Health) map[string]float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + h.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	body, _ := io.ReadAll(resp.Body)
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v\n%s", err, body)
	}
	out := map[string]float64{}
	series := func(name string, labels []*dto.LabelPair, extra ...string) string {
		var ls []string
		for _, l := range labels {
			ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		ls = append(ls, extra...)
		sort.Strings(ls)
		if len(ls) == 0 {
			return name
		}
		return name + "{" + strings.Join(ls, ",") + "}"
	}
	put := func(k string, v float64) {
		if _, dup := out[k]; dup {
			t.Errorf("series %s given twice", k)
		}
		out[k] = v
	}
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		if !strings.Contains(string(body), "\n# TYPE "+name+" ") && !strings.HasPrefix(string(body), "# TYPE "+name+" ") {
			t.Errorf("%s has no TYPE line", name)
		}
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				put(series(name, m.GetLabel()), m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				put(series(name, m.GetLabel()), m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				hm := m.GetHistogram()
				prev, prevLe := uint64(0), math.Inf(-1)
				for _, b := range hm.GetBucket() {
					if b.GetCumulativeCount() < prev || b.GetUpperBound() <= prevLe {
						t.Errorf("%s: buckets not cumulative or not in order at le=%v", series(name, m.GetLabel()), b.GetUpperBound())
					}
					prev, prevLe = b.GetCumulativeCount(), b.GetUpperBound()
					put(series(name+"_bucket", m.GetLabel(), fmt.Sprintf("le=%q", model.FloatString(b.GetUpperBound()).String())), float64(b.GetCumulativeCount()))
				}
				if !strings.Contains(string(body), name+"_bucket{") || !strings.Contains(string(body), `le="+Inf"`) {
					t.Errorf("%s: no +Inf bucket", name)
				}
				if prev > hm.GetSampleCount() {
					t.Errorf("%s: the last bucket holds %d, more than _count %d", series(name, m.GetLabel()), prev, hm.GetSampleCount())
				}
				put(series(name+"_sum", m.GetLabel()), hm.GetSampleSum())
				put(series(name+"_count", m.GetLabel()), float64(hm.GetSampleCount()))
			default:
				t.Errorf("%s: type %v", name, f.GetType())
			}
		}
	}
	// +Inf is what the parser folds into _count: check it in the text.
	for _, line := range strings.Split(string(body), "\n") {
		if i := strings.Index(line, `,le="+Inf"} `); i > 0 {
			name, _, _ := strings.Cut(line, "_bucket{")
			labels := line[len(name)+len("_bucket{") : i]
			if cnt := fmt.Sprintf("%s_count{%s} %s", name, labels, line[i+len(`,le="+Inf"} `):]); !strings.Contains(string(body), cnt+"\n") {
				t.Errorf("the +Inf bucket %q is not its _count (%q)", line, cnt)
			}
		}
	}
	return out
}

// serveOps serves a daemon of state in this process on its socket, on
// loopback TCP with the credentials of ca, and its health server; stop
// ends it (a drain).
func serveOps(t *testing.T, state, ca string) (s *server.Server, h *server.Health, stop func()) {
	t.Helper()
	s, err := server.Open(server.Config{Config: daemon.Config{StateDir: state, Log: slog.New(slog.DiscardHandler)},
		Listen: "127.0.0.1:0", TLSDir: ca})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h = s.ServeHealth(ln)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	return s, h, func() { cancel(); <-served; h.Close() }
}

// TestFleetMetrics drives a daemon through what issue 13's metrics count
// and checks each figure in /metrics, parsed strictly: the command
// duration histogram, kill latency (a timeout, a client's cancel),
// output bytes by stream, connections rejected by reason (plaintext, no
// certificate, another CA, expired, revoked, read-only), resets, sessions
// by kind, detached jobs; then a second daemon's take-overs.
func TestFleetMetrics(t *testing.T) {
	mark := testproc.Guard(t, 120*time.Second)
	state, ca := t.TempDir(), filepath.Join(t.TempDir(), "ca")
	if err := tlsdir.Init(ca, tlsdir.InitOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	s, h, stop := serveOps(t, state, ca)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	c, err := client.Dial(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	env := []string{mark, "PATH=" + os.Getenv("PATH")}
	var sink, errSink strings.Builder // two writers: stderr is not merged
	o := client.ExecOptions{Env: env, Dir: "/", Stdout: &sink, Stderr: &errSink}
	ctx := context.Background()
	for _, code := range []string{"echo hello", "printf abc >&2", "sleep 0.3"} {
		if _, err := c.Exec(ctx, "s", code, o); err != nil {
			t.Fatalf("%s: %v", code, err)
		}
	}
	oo := o
	oo.Oneshot = true
	if _, err := c.Exec(ctx, "", "printf 12345678", oo); err != nil {
		t.Fatal(err)
	}
	ot := o
	ot.Timeout = 200 * time.Millisecond
	if res, _ := c.Exec(ctx, "s", "sleep 30", ot); res == nil || res.Outcome != "timeout" {
		t.Fatalf("timeout: %+v", res)
	}
	interrupt := make(chan struct{})
	oi := o
	oi.Interrupt = interrupt
	time.AfterFunc(300*time.Millisecond, func() { close(interrupt) })
	if res, _ := c.Exec(ctx, "s", "sleep 30", oi); res == nil || res.Outcome != "cancelled" {
		t.Fatalf("cancel: %+v", res)
	}
	od := o
	od.DetachOnDisconnect = true
	if _, err := c.Exec(ctx, "s", "true", od); err != nil {
		t.Fatal(err)
	}

	// Refusals: plaintext, no certificate, another CA, expired, revoked,
	// read-only.
	addr := s.Addr().String()
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	wc := wire.NewConn(pc)
	wc.WriteJSON(wire.FrameHello, wire.Hello{Protocol: wire.Protocol, Versions: []int{wire.Version}})
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	wc.ReadFrame(wire.MaxControl)
	pc.Close()
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(ca, tlsdir.CAFile))
	pool.AppendCertsFromPEM(caPEM)
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	if err == nil {
		tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		tc.Read(make([]byte, 1)) // TLS 1.3: the verdict comes with the first read
		tc.Close()
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := tlsdir.Init(other, tlsdir.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(other, tlsdir.ClientFile), filepath.Join(other, tlsdir.ClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	tc, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }})
	if err == nil {
		tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		tc.Read(make([]byte, 1))
		tc.Close()
	}
	for _, name := range []string{"gone", "viewer"} {
		dir := filepath.Join(t.TempDir(), name)
		if _, err := tlsdir.Issue(ca, name, tlsdir.IssueOptions{ReadOnly: name == "viewer"}, dir); err != nil {
			t.Fatal(err)
		}
		if name == "gone" {
			if _, err := tlsdir.Revoke(ca, name); err != nil {
				t.Fatal(err)
			}
			if _, err := client.Dial(ctx, addr, client.TLS(dir)); err == nil {
				t.Fatal("a revoked client was let in")
			}
			continue
		}
		rc, err := client.Dial(ctx, addr, client.TLS(dir))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Exec(ctx, "s", "echo ran", client.ExecOptions{}); err == nil {
			t.Fatal("a read-only identity ran a command")
		}
		if _, err := rc.Kill(ctx, true); err == nil {
			t.Fatal("a read-only identity killed")
		}
		rc.Close()
	}

	var m map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m = scrape(t, h)
		if m[`corral_connections_rejected_total{reason="unknown_ca"}`] >= 1 && m[`corral_connections_rejected_total{reason="no_certificate"}`] >= 1 &&
			m[`corral_connections_rejected_total{reason="plaintext"}`] >= 1 && m[`corral_connections_rejected_total{reason="revoked"}`] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refusals were not all counted: %v", m)
		}
	}
	want := map[string]float64{
		`corral_command_duration_seconds_count{kind="session"}`:     6, // 3, the timeout, the cancel, the detached one
		`corral_command_duration_seconds_count{kind="oneshot"}`:     1,
		`corral_kill_latency_seconds_count{why="timeout"}`:          1,
		`corral_kill_latency_seconds_count{why="client"}`:           1,
		`corral_output_bytes_total{kind="session",stream="stdout"}`: 6,
		`corral_output_bytes_total{kind="session",stream="stderr"}`: 3,
		`corral_output_bytes_total{kind="oneshot",stream="stdout"}`: 8,
		`corral_connections_rejected_total{reason="plaintext"}`:     1,
		`corral_connections_rejected_total{reason="unknown_ca"}`:    1,
		`corral_connections_rejected_total{reason="revoked"}`:       1,
		`corral_connections_rejected_total{reason="read_only"}`:     2,
		`corral_connections_rejected_total{reason="expired"}`:       0,
		`corral_connections_rejected_total{reason="stopping"}`:      0,
		`corral_connections_rejected_total{reason="too_many"}`:      0,
		`corral_session_resets_total`:                               2, // the timeout's and the cancel's
		`corral_takeovers_total`:                                    0,
		`corral_sessions_by_kind{kind="exec"}`:                      1,
		`corral_detached_jobs`:                                      1,
		`corral_detached_jobs_started_total`:                        1,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	// Go's TLS client offers no certificate the daemon's CA list does not
	// name: the client of no certificate counts once, at least.
	if m[`corral_connections_rejected_total{reason="no_certificate"}`] < 1 {
		t.Errorf("no_certificate not counted")
	}
	// The 0.3 s command lands in the 0.5 s bucket, not the 0.25 s one.
	if lo, hi := m[`corral_command_duration_seconds_bucket{kind="session",le="0.25"}`], m[`corral_command_duration_seconds_bucket{kind="session",le="0.5"}`]; hi-lo < 1 {
		t.Errorf("no session command between 0.25 and 0.5 s: %v %v", lo, hi)
	}
	for _, why := range []string{"timeout", "client"} {
		if sum := m[`corral_kill_latency_seconds_sum{why="`+why+`"}`]; sum <= 0 || sum > 6 {
			t.Errorf("kill latency of the %s stop: %v s", why, sum)
		}
	}
	t.Logf("kill latency: timeout %.1f ms, client %.1f ms", 1000*m[`corral_kill_latency_seconds_sum{why="timeout"}`], 1000*m[`corral_kill_latency_seconds_sum{why="client"}`])

	// A second daemon takes the session's shell over.
	c.Close()
	stop()
	stopped = true
	_, h2, stop2 := serveOps(t, state, ca)
	defer stop2()
	c2, err := client.Dial(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := scrape(t, h2); m[`corral_takeovers_total`] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second daemon's take-over is not counted: %v", scrape(t, h2))
		}
	}
	if _, err := c2.Kill(ctx, true); err != nil {
		t.Error(err)
	}
}
