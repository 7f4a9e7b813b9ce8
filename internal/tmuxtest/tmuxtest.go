// Package tmuxtest gives a test a tmux server of its own: tmux is the
// oracle that corral's terminal screens are compared with, and the
// user's outer terminal in the attach tests. It is for tests only.
//
// The server's socket and config live in a directory of the test's, so
// no other tmux is touched, and the test's cleanup ends the server
// through that socket: nothing that is not the test's own.
package tmuxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Server is a private tmux server. It runs from its first session on
// (Run("new-session", ...)) until the test's cleanup kills it.
type Server struct {
	// Sock and Conf are the server's socket and config file; Env is the
	// environment every tmux command runs with, and so that of the
	// server and the programs in its panes.
	Sock, Conf string
	Env        []string
	t          testing.TB
}

// New skips t where tmux is not installed. Otherwise it writes conf (tmux
// commands, one a line) as the config of a server whose socket is in
// dir, and returns the server: it starts with the first Run of
// new-session. Its tmux commands run with env and TMUX= (so a test run
// inside tmux never reaches that tmux).
func New(t testing.TB, dir, conf string, env []string) *Server {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: apt-get install tmux")
	}
	s := &Server{Sock: filepath.Join(dir, "tmux.sock"), Conf: filepath.Join(dir, "tmux.conf"),
		Env: append(env[:len(env):len(env)], "TMUX="), t: t}
	if err := os.WriteFile(s.Conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Only this test's own server, by its own socket (an error:
		// it never started, or it is gone already).
		exec.Command("tmux", "-S", s.Sock, "kill-server").Run()
	})
	return s
}

// Command is the tmux command args on the server, for the caller to run
// as it needs (a tmux attach on a PTY); the caller may add to its Env.
func (s *Server) Command(args ...string) *exec.Cmd {
	cmd := exec.Command("tmux", append([]string{"-S", s.Sock, "-f", s.Conf}, args...)...)
	cmd.Env = s.Env[:len(s.Env):len(s.Env)]
	return cmd
}

// Run runs the tmux command args on the server and returns its output;
// a failure fails the test.
func (s *Server) Run(args ...string) string {
	s.t.Helper()
	out, err := s.Command(args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// DiffRows shows the rows where two screens (rows joined by newlines)
// differ: each such row's number, then its text in want and in got,
// labelled wantName and gotName.
func DiffRows(want, got, wantName, gotName string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	width := max(len(wantName), len(gotName))
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "row %d:\n  %-*s %q\n  %-*s %q\n", i, width, wantName, a, width, gotName, c)
		}
	}
	return b.String()
}
