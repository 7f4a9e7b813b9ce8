//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/corral-dev/corral/internal/mcpserver"
)

// screenKeys returns the keys of a term_screen reply's structuredContent.
func screenKeys(t *testing.T, sc any) string {
	t.Helper()
	b, _ := json.Marshal(sc)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// TestMCPTermScreenSmallUnchanged: a screen and scrollback well under
// max_output_bytes come back as they always did: every row, no marker
// line, no field about a cut, nothing written to mcp-output/.
func TestMCPTermScreenSmallUnchanged(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	if r := call(t, cs, "term_open", map[string]any{"name": "small", "size": "40x5",
		"command": []string{"sh", "-c", "seq 1 8; echo done; exec sleep 1000"}}, nil); r.IsError {
		t.Fatalf("term_open: %s", text(r))
	}
	if r := call(t, cs, "term_wait", map[string]any{"name": "small", "text": "^done$", "timeout_ms": 20000}, nil); r.IsError {
		t.Fatalf("term_wait: %s", text(r))
	}
	cliScreen, errs, rc := e.run("term", "screen", "small", "--scrollback", "10")
	if rc != 0 {
		t.Fatalf("corral term screen: %d %s", rc, errs)
	}
	for _, args := range []map[string]any{{"name": "small"}, {"name": "small", "scrollback": 10}} {
		var o mcpserver.TermScreenOutput
		r := call(t, cs, "term_screen", args, &o)
		if r.IsError {
			t.Fatalf("term_screen %v: %s", args, text(r))
		}
		want := fmt.Sprintf("[40x5, cursor %d,%d]", o.CursorX, o.CursorY)
		rows := cliScreen
		if args["scrollback"] == nil {
			rows = o.Text
			if len(o.Scrollback) != 0 {
				t.Errorf("scrollback without asking: %q", o.Scrollback)
			}
		}
		if got := text(r); got != rows+want || !strings.HasSuffix(cliScreen, o.Text) || !strings.Contains(o.Text, "done\n") {
			t.Errorf("term_screen %v: text %q, want %q", args, got, rows+want)
		}
		keys := "alt_screen cols cursor_visible cursor_x cursor_y exited rows text"
		if args["scrollback"] != nil {
			keys = "alt_screen cols cursor_visible cursor_x cursor_y exited rows scrollback text"
		}
		if got := screenKeys(t, r.StructuredContent); got != keys {
			t.Errorf("term_screen %v: structured fields %s, want %s", args, got, keys)
		}
	}
	var w mcpserver.TermWaitOutput
	r := call(t, cs, "term_wait", map[string]any{"name": "small", "idle_ms": 1, "timeout_ms": 5000}, &w)
	if r.IsError || text(r) != "waited: "+w.Reason+"\n"+w.Screen.Text+fmt.Sprintf("[40x5, cursor %d,%d]", w.Screen.CursorX, w.Screen.CursorY) {
		t.Errorf("term_wait: %q", text(r))
	}
	var sc struct{ Screen any }
	b, _ := json.Marshal(r.StructuredContent)
	json.Unmarshal(b, &sc)
	if got := screenKeys(t, sc.Screen); got != "alt_screen cols cursor_visible cursor_x cursor_y exited rows text" {
		t.Errorf("term_wait: screen's fields %s", got)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.state, "mcp-output", "*")); len(ents) != 0 {
		t.Errorf("files written for a small screen: %v", ents)
	}
}
