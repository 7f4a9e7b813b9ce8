//go:build linux

package client_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestClientSessionLimits: a session's limits and accounting travel the
// wire both ways: the limits a command creates a session with, a change
// of them (limits_changed), a command's accounting, and ls's limits and
// memory and pids in use. Where the memory and pids controllers are
// missing (these machines), creating the session is a start failure that
// names the controller, and nothing is listed; in the VM the limits are
// in force.
func TestClientSessionLimits(t *testing.T) {
	base, err := contain.CgroupBase()
	if err != nil {
		t.Skipf("no usable cgroup v2 here: %v", err)
	}
	ctl, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	have := strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") && strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " pids ")
	mark := testproc.Guard(t, 90*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	state := t.TempDir()
	s, err := server.Open(server.Config{Config: daemon.Config{StateDir: state, Isolation: corral.IsolationCgroup, Log: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-served })
	defer stop()
	c, err := client.Dial(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer c.Kill(context.Background(), true)
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	want := corral.Limits{MemoryMax: 128 << 20, PidsMax: 64}
	res, err := c.Exec(cctx, "lim", "true", client.ExecOptions{Env: env, Dir: "/", Stdout: io.Discard, Limits: want})
	if !have {
		if res == nil || res.Outcome != corral.OutcomeStartFailed || !strings.Contains(res.Error, "controller is not delegated") {
			t.Fatalf("limits without the controllers: %v %+v", err, res)
		}
		if list, err := c.List(cctx); err != nil || len(list) != 0 {
			t.Fatalf("a session was listed although its limits were refused: %v %+v", err, list)
		}
		// Without limits it is made, and its commands are accounted.
		res, err = c.Exec(cctx, "plain", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done", client.ExecOptions{Env: env, Dir: "/"})
		if err != nil || res.CPUUserMs == nil || *res.CPUUserMs <= 0 || res.Accounting == "" || !res.Limits.IsZero() {
			t.Fatalf("accounting over the wire: %v %+v", err, res)
		}
		list, err := c.List(cctx)
		if err != nil || len(list) != 1 || list[0].MemoryBytes != nil || !strings.Contains(list[0].Accounting, "memory controller not delegated") {
			t.Fatalf("ls of a session without the memory controller: %v %+v", err, list)
		}
		return
	}
	if err != nil || res.Limits != want || res.LimitsChanged || res.MemoryPeakBytes == nil || res.PidsPeak == nil || res.CPUUserMs == nil {
		t.Fatalf("create with limits: %v %+v", err, res)
	}
	list, err := c.List(cctx)
	if err != nil || len(list) != 1 || list[0].Limits != want || list[0].MemoryBytes == nil || list[0].Pids == nil {
		t.Fatalf("ls: %v %+v", err, list)
	}
	res, err = c.Exec(cctx, "lim", "true", client.ExecOptions{Env: env, Dir: "/", Limits: corral.Limits{PidsMax: -1, CPUs: 0.5}})
	want = corral.Limits{MemoryMax: 128 << 20, CPUs: 0.5}
	if err != nil || !res.LimitsChanged || res.Limits != want {
		t.Fatalf("change: %v %+v", err, res)
	}
	b, _ := os.ReadFile(filepath.Join(res.Cgroup, "cpu.max"))
	p, _ := os.ReadFile(filepath.Join(res.Cgroup, "pids.max"))
	if strings.TrimSpace(string(b)) != "50000 100000" || strings.TrimSpace(string(p)) != "max" {
		t.Fatalf("cgroup after the change: cpu.max %q, pids.max %q", b, p)
	}
	if list, err = c.List(cctx); err != nil || list[0].Limits != want {
		t.Fatalf("ls after the change: %v %+v", err, list)
	}
}
