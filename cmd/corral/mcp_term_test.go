//go:build linux

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/mcpserver"
)

// TestMCPTermTools: an agent opens a shell on a terminal, types text and
// keys, waits for what it printed, reads the screen, sees the session's
// kind, and ends it; bad inputs are tool errors that say what is wrong.
func TestMCPTermTools(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	var opened mcpserver.TermOpenOutput
	if r := call(t, cs, "term_open", map[string]any{"name": "agent", "command": []string{"sh"}, "size": "70x20",
		"env": map[string]any{"PS1": "$ ", "MCPVAR": "from-mcp"}}, &opened); r.IsError {
		t.Fatalf("term_open: %s", text(r))
	}
	if !opened.Created || !opened.Started || opened.Cols != 70 || opened.Rows != 20 || opened.HolderPid == 0 {
		t.Errorf("term_open: %+v", opened)
	}
	var w mcpserver.TermWaitOutput
	if r := call(t, cs, "term_wait", map[string]any{"name": "agent", "text": `^\$ ?$`, "timeout_ms": 10000}, &w); r.IsError || w.Reason != "text" {
		t.Fatalf("term_wait for the prompt: %s %+v", text(r), w)
	}
	if r := call(t, cs, "term_send", map[string]any{"name": "agent", "text": `echo "v=$MCPVAR n=$((6*7))"`, "keys": []string{"Enter"}}, nil); r.IsError {
		t.Fatalf("term_send: %s", text(r))
	}
	if r := call(t, cs, "term_wait", map[string]any{"name": "agent", "text": `^v=\S+ n=\d+`, "timeout_ms": "10000"}, &w); r.IsError || w.Match != "v=from-mcp n=42" {
		t.Fatalf("term_wait: %s %+v", text(r), w)
	}
	if !strings.Contains(w.Screen.Text, "v=from-mcp n=42") || w.Screen.Cols != 70 {
		t.Errorf("the wait's screen: %+v", w.Screen)
	}
	var scr mcpserver.TermScreenOutput
	if r := call(t, cs, "term_screen", map[string]any{"name": "agent"}, &scr); r.IsError || !strings.Contains(text(r), "v=from-mcp n=42") || scr.Exited {
		t.Fatalf("term_screen: %s %+v", text(r), scr)
	}
	if r := call(t, cs, "term_wait", map[string]any{"name": "agent", "text": "never", "timeout_ms": 200}, &w); r.IsError || w.Reason != "timeout" {
		t.Errorf("a wait that times out: %s %+v", text(r), w)
	}
	var ss mcpserver.SessionsOutput
	call(t, cs, "sessions", map[string]any{}, &ss)
	if len(ss.Sessions) != 1 || ss.Sessions[0].Kind != "terminal" {
		t.Errorf("sessions: %+v", ss.Sessions)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"term_open", map[string]any{"name": "bad name"}, "name"},
		{"term_open", map[string]any{"name": "x", "size": "80"}, "COLSxROWS"},
		{"term_open", map[string]any{"name": "x", "size": "0x10"}, "size"},
		{"term_open", map[string]any{"name": "x", "cwd": "rel"}, "absolute"},
		{"term_open", map[string]any{"name": "x", "env": map[string]any{"A-B": "1"}}, "variable name"},
		{"term_open", map[string]any{"name": "agent"}, "open already"},
		{"term_send", map[string]any{"name": "agent", "keys": []string{"Entr"}}, `unknown key name "Entr"`},
		{"term_send", map[string]any{"name": "agent"}, "text, keys"},
		{"term_send", map[string]any{"name": "nosuch", "text": "x"}, "no such session"},
		{"term_screen", map[string]any{"name": "nosuch"}, "no such session"},
		{"term_wait", map[string]any{"name": "agent"}, "what to wait for"},
		{"term_wait", map[string]any{"name": "agent", "text": "(", "timeout_ms": 100}, "pattern"},
		{"term_wait", map[string]any{"name": "agent", "exit": true, "timeout_ms": 60000}, "timeout_ms must be at most 55000"},
	} {
		r := call(t, cs, tc.tool, tc.args, nil)
		if !r.IsError || !strings.Contains(text(r), tc.want) {
			t.Errorf("%s %v: isError %v, %q (want %q)", tc.tool, tc.args, r.IsError, text(r), tc.want)
		}
	}
	// The exit, then the end of the session.
	call(t, cs, "term_send", map[string]any{"name": "agent", "text": "exit 5", "keys": []string{"Enter"}}, nil)
	if r := call(t, cs, "term_wait", map[string]any{"name": "agent", "exit": true, "timeout_ms": 10000}, &w); r.IsError || w.Reason != "exit" ||
		!w.Screen.Exited || w.Screen.ExitCode == nil || *w.Screen.ExitCode != 5 {
		t.Fatalf("term_wait exit: %s %+v", text(r), w.Screen)
	}
	if r := call(t, cs, "kill_session", map[string]any{"name": "agent"}, nil); r.IsError {
		t.Fatalf("kill_session: %s", text(r))
	}
	if !waitGone(opened.HolderPid, 10*time.Second) {
		t.Error("the holder outlived kill_session")
	}
}
