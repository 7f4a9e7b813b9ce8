package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestRecoveryInProcess: a daemon stopped with sessions running, and the
// next one (in this process, so that the race detector sees recovery,
// listings and commands at once) takes every shell over in the background
// while clients list and run commands, each session's state intact.
func TestRecoveryInProcess(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	env := append(testproc.Env(mark), "SHELL=/bin/sh")
	serve := func() (*client.Client, func()) {
		stop := runDaemon(t, daemon.Config{StateDir: state, Isolation: "pgroup", Log: slog.New(slog.DiscardHandler)})
		c, err := client.Dial(context.Background(), state)
		if err != nil {
			t.Fatal(err)
		}
		return c, func() { c.Close(); stop() }
	}
	run := func(c *client.Client, name, code string) string {
		var out strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := c.Exec(ctx, name, code, client.ExecOptions{Stdout: &out, Stderr: io.Discard, Dir: "/", Env: env})
		if err != nil || res.ExitCode != 0 {
			t.Errorf("%s: %q: %v %+v", name, code, err, res)
		}
		return out.String()
	}
	const n = 6
	c, stop := serve()
	for i := 0; i < n; i++ {
		run(c, "s"+strconv.Itoa(i), "export X="+strconv.Itoa(i))
	}
	before, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, s := range before {
		pids[s.Name] = s.ShellPid
	}
	stop() // the shells go on

	c, stop = serve()
	defer func() { c.Kill(context.Background(), true); stop() }()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			if out := run(c, "s"+strconv.Itoa(i), `echo "$X"`); out != strconv.Itoa(i)+"\n" {
				t.Errorf("s%d after the take-over: %q", i, out)
			}
		}(i)
		go func() {
			defer wg.Done()
			if _, err := c.List(context.Background()); err != nil {
				t.Errorf("list: %v", err)
			}
		}()
	}
	wg.Wait()
	list, err := c.List(context.Background())
	if err != nil || len(list) != n {
		t.Fatalf("list: %v %+v", err, list)
	}
	for _, s := range list {
		if s.State != "up" || s.ShellPid != pids[s.Name] {
			t.Errorf("%s: %+v, not the shell %d taken over", s.Name, s, pids[s.Name])
		}
	}
}
