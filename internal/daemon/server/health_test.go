//go:build linux

package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestHealthAcrossServeAndDrain follows /readyz, /healthz and /metrics of
// a real daemon from Open to the end of a drain: not ready before Serve
// accepts, ready while it serves, not ready (draining) from the moment its
// context ends while a command runs; meanwhile a new client is told the
// daemon is stopping and the running command finishes with its output.
func TestHealthAcrossServeAndDrain(t *testing.T) {
	mark := testproc.Guard(t, 90*time.Second)
	var logs testproc.Buffer
	cfg := server.Config{Config: daemon.Config{StateDir: t.TempDir(), Log: slog.New(slog.NewJSONHandler(&logs, nil))}}
	s, err := server.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := s.ServeHealth(ln)
	defer h.Close()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := hc.Get("http://" + h.Addr().String() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not accepting connections yet") {
		t.Errorf("readyz before Serve: %d %s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("healthz before Serve: %d", code)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "\ncorral_ready 0\n") {
		t.Errorf("metrics before Serve say ready:\n%s", body)
	}
	if resp, err := hc.Post("http://"+h.Addr().String()+"/metrics", "text/plain", nil); err != nil || resp.StatusCode != 405 {
		t.Errorf("POST /metrics: %v %v, want 405", resp, err)
	} else {
		resp.Body.Close()
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetDrain(20*time.Second, nil)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if code, _ := get("/readyz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready after Serve")
		}
	}

	c, err := client.Dial(context.Background(), cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	env := testproc.Env(mark)
	var out strings.Builder
	execDone := make(chan error, 1)
	go func() {
		res, err := c.Exec(context.Background(), "s", "sleep 1; echo done", client.ExecOptions{Env: env, Dir: "/", Stdout: &out})
		if err == nil && res.ExitCode != 0 {
			err = errors.New("the command ended " + string(res.Outcome))
		}
		execDone <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, body := get("/metrics"); strings.Contains(body, "\ncorral_sessions_busy 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session never got busy")
		}
	}
	cancel() // as SIGTERM does
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if code, body := get("/readyz"); code == 503 && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz never said draining")
		}
	}
	if _, err := client.Dial(context.Background(), cfg.StateDir); !errors.Is(err, client.ErrDaemonStopping) {
		t.Errorf("a new client while draining: %v, want ErrDaemonStopping", err)
	}
	if err := <-execDone; err != nil || out.String() != "done\n" {
		t.Errorf("the running command: %v, output %q", err, out.String())
	}
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	if !strings.Contains(logs.String(), `"msg":"drained: every call under way ended"`) {
		t.Errorf("no drained line in:\n%s", logs.String())
	}

	// The session outlived the drain: a second daemon takes it over, and
	// ends it so that nothing of the test survives it.
	stop := runDaemon(t, cfg)
	defer stop()
	c2, err := client.Dial(context.Background(), cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	list, err := c2.List(context.Background())
	if err != nil || len(list) != 1 || list[0].State != "up" {
		t.Errorf("after the drain: %+v %v", list, err)
	}
	if _, err := c2.Kill(context.Background(), true); err != nil {
		t.Error(err)
	}
}
