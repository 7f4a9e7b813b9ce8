//go:build linux

package main

import (
	"os"
	"strings"
	"testing"
)

// TestExecRefusesWhatItCannotCarry: bytes that are not UTF-8 in the
// command, the working directory or the environment made every call fail
// with "grpc: error while marshaling" (exit 125), even to an existing
// session. Until they travel as bytes, each is refused as a usage error
// naming what is wrong, and nothing reaches the daemon; --oneshot with a
// session name was silently run outside the session.
func TestExecRefusesWhatItCannotCarry(t *testing.T) {
	e := newDaemonEnv(t)
	if _, rc := e.exec("s", "true"); rc != 0 {
		t.Fatal("first command failed")
	}
	bad := t.TempDir() + "/d\xff"
	if err := os.Mkdir(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		env  string
		dir  string
		want string
	}{
		{"command", []string{"exec", "-s", "s", "--", "echo \xff"}, "", "", "the command holds bytes that are not UTF-8"},
		{"environment", []string{"exec", "-s", "s", "--", "echo hi"}, "BADV=a\xffb", "", `environment variable "BADV" is not UTF-8`},
		{"cwd", []string{"exec", "-s", "s", "--", "pwd"}, "", bad, "is not UTF-8"},
		{"oneshot with a session", []string{"exec", "--oneshot", "-s", "s", "--", "true"}, "", "", "takes no -s NAME"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := cli(t, e.mark, e.state, c.args...)
			if c.env != "" {
				cmd.Env = append(cmd.Env, c.env)
			}
			cmd.Dir = c.dir
			_, errs, rc := runCaptured(cmd)
			if rc != 2 || !strings.Contains(errs, c.want) || strings.Contains(errs, "marshaling") {
				t.Fatalf("exit %d, stderr %q; want 2 saying %q", rc, errs, c.want)
			}
		})
	}
	if out, rc := e.exec("s", "echo still"); rc != 0 || out != "still\n" {
		t.Fatalf("the session after the refusals: %q %d", out, rc)
	}
}
