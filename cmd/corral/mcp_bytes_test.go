//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-dev/corral/internal/mcpserver"
)

// TestMCPBytes: MCP replies are JSON text, which cannot hold bytes that
// are not UTF-8. Output holding such bytes comes with U+FFFD in their
// place and output_not_utf8 set (the text content says so too), the exact
// bytes staying in output_file; a cwd that is not UTF-8 comes with
// cwd_bytes (base64). A server started in such a directory, with such a
// variable in its environment, works: before, every exec failed, the
// client refusing its environment and cwd.
func TestMCPBytes(t *testing.T) {
	e := newDaemonEnv(t)
	dir := filepath.Join(t.TempDir(), "caf\xe9")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := cli(t, e.mark, e.state, "mcp")
	c.Dir = dir
	c.Env = append(c.Env, "BADV=\xff\xfe")
	c.Stderr = os.Stderr
	cl := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: c, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	o := execOK(t, cs, map[string]any{"command": `printf 'a\377b\n'; printf '%s|' "$BADV"; pwd`})
	wantOut := "a\xffb\n\xff\xfe|" + dir + "\n"
	if o.Status != "done" || o.ExitCode == nil || *o.ExitCode != 0 || !o.OutputNotUTF8 || o.Output != strings.ToValidUTF8(wantOut, "\ufffd") {
		t.Fatalf("exec: %+v", o)
	}
	if b, err := os.ReadFile(o.OutputFile); err != nil || string(b) != wantOut {
		t.Errorf("output_file %q %v, want %q", b, err, wantOut)
	}
	if o.CwdBytes != base64.StdEncoding.EncodeToString([]byte(dir)) || o.Cwd != strings.ToValidUTF8(dir, "\ufffd") {
		t.Errorf("cwd %q cwd_bytes %q", o.Cwd, o.CwdBytes)
	}
	r := call(t, cs, "exec", map[string]any{"command": `printf '\351'`}, nil)
	if txt := text(r); !strings.Contains(txt, "not UTF-8") || !strings.Contains(txt, "\ufffd") {
		t.Errorf("text content: %q", txt)
	}
	// UTF-8 output is not flagged.
	if o := execOK(t, cs, map[string]any{"command": "echo é; cd /tmp"}); o.OutputNotUTF8 || o.Output != "é\n" || o.CwdBytes != "" || o.Cwd != "/tmp" {
		t.Errorf("UTF-8: %+v", o)
	}
	// Each stream apart.
	o = execOK(t, cs, map[string]any{"command": `printf 'o\377'; printf 'e\376' >&2`, "separate_stderr": true})
	if !o.OutputNotUTF8 || o.Stdout == nil || *o.Stdout != "o\ufffd" || o.Stderr == nil || *o.Stderr != "e\ufffd" {
		t.Errorf("separate_stderr: %+v", o)
	}
	// The sessions tool shows a cwd that is not UTF-8 with cwd_bytes.
	execOK(t, cs, map[string]any{"command": "true", "session": "b"}) // starts in the server's directory
	var so mcpserver.SessionsOutput
	call(t, cs, "sessions", map[string]any{}, &so)
	seen := 0
	for _, s := range so.Sessions {
		switch s.Name {
		case "b":
			seen++
			if s.CwdBytes != base64.StdEncoding.EncodeToString([]byte(dir)) || s.Cwd != strings.ToValidUTF8(dir, "\ufffd") {
				t.Errorf("sessions: %+v", s)
			}
		case mcpserver.DefaultSession(dir):
			seen++
			if s.CwdBytes != "" || s.Cwd != "/tmp" {
				t.Errorf("sessions: %+v", s)
			}
		}
	}
	if seen != 2 {
		t.Errorf("sessions: %+v", so)
	}
}
