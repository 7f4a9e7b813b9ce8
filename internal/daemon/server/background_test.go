//go:build linux

package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestBackgroundOutputThroughTheDaemon: what a command's background job
// writes after the command has ended is in no later command's output; ls
// says how much the session keeps, and an exec with BackgroundOutput
// prints it once and runs nothing.
func TestBackgroundOutputThroughTheDaemon(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	env := append(testproc.Env(mark), "SHELL=/bin/bash")
	c := serveDaemon(t, server.Config{Config: daemon.Config{}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	exec := func(code string, o client.ExecOptions) (string, string, *client.Result, error) {
		var out, errs strings.Builder
		o.Env, o.Dir, o.Stdout, o.Stderr = env, "/", &out, &errs
		r, err := c.Exec(ctx, "bg", code, o)
		return out.String(), errs.String(), r, err
	}
	if out, _, _, err := exec("(sleep 0.3; echo LATE; echo late-err >&2) & echo first", client.ExecOptions{}); err != nil || out != "first\n" {
		t.Fatalf("the command: %q %v", out, err)
	}
	if out, errs, _, err := exec("sleep 0.8; echo second", client.ExecOptions{}); err != nil || out != "second\n" || errs != "" {
		t.Fatalf("the next command: %q %q %v", out, errs, err)
	}
	var kept int64
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		list, err := c.List(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("ls: %+v %v", list, err)
		}
		if kept = list[0].BackgroundBytes; kept == int64(len("LATE\nlate-err\n")) {
			break
		}
	}
	if kept != int64(len("LATE\nlate-err\n")) {
		t.Fatalf("ls says %d bytes of background output kept", kept)
	}
	out, errs, r, err := exec("", client.ExecOptions{BackgroundOutput: true})
	if err != nil || out != "LATE\n" || errs != "late-err\n" || r.ExitCode != 0 {
		t.Fatalf("--background-output: %q %q %+v %v", out, errs, r, err)
	}
	if out, errs, _, err := exec("", client.ExecOptions{BackgroundOutput: true}); err != nil || out != "" || errs != "" {
		t.Fatalf("taken twice: %q %q %v", out, errs, err)
	}
	if _, _, _, err := exec("echo x", client.ExecOptions{BackgroundOutput: true}); err == nil || !strings.Contains(err.Error(), "no command") {
		t.Fatalf("with a command: %v", err)
	}
	var out2 strings.Builder
	if _, err := c.Exec(ctx, "nosuch", "", client.ExecOptions{BackgroundOutput: true, Env: env, Dir: "/", Stdout: &out2}); err == nil {
		t.Fatal("a session that does not exist: no error")
	}
}
