//go:build linux

package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-dev/corral/internal/mcpserver"
)

// TestRemoteMCP: corral mcp --host --tls in the client's network namespace
// drives the daemon in the other: its exec tool runs in a session there,
// which starts in the daemon's home with the daemon's environment, the
// agent variables and the call's env, nothing of the MCP server's own
// directory (/tmp) or environment; its sessions tool lists the session,
// and kill_session ends it.
func TestRemoteMCP(t *testing.T) {
	e := newRemoteEnv(t)
	home, _ := os.UserHomeDir()
	c := e.client(e.ca, "mcp")
	c.Stderr = os.Stderr
	cl := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: c, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var out mcpserver.ExecOutput
	res := call(t, cs, "exec", map[string]any{"session": "m", "env": map[string]string{"GIVEN": "yes"},
		"command": `pwd; echo "[$CORRAL_CLIENT_ONLY] [$PAGER] [$GIVEN]"`}, &out)
	if want := home + "\n[] [cat] [yes]\n"; res.IsError || out.Status != "done" || out.Output != want {
		t.Fatalf("remote exec over MCP: %+v %q (want %q) %s\n%s", out, out.Output, want, text(res), e.readLog())
	}
	e.awaitLog(t, "the MCP server's connection", "remote client connected", "identity=admin", "remote="+e.net.clientIP+":")
	if m := e.ls(); m["m"].State != "up" || m["m"].Cwd != home {
		t.Errorf("the remote session, seen on the daemon's machine: %+v", m["m"])
	}
	res = call(t, cs, "sessions", map[string]any{}, nil)
	if res.IsError || !strings.Contains(text(res), "m up") {
		t.Errorf("sessions over MCP: %s", text(res))
	}
	if res = call(t, cs, "kill_session", map[string]any{"name": "m"}, nil); res.IsError {
		t.Errorf("kill_session over MCP: %s", text(res))
	}
	if m := e.ls(); len(m) != 0 {
		t.Errorf("after kill_session: %v", m)
	}
}
