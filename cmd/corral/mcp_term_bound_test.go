//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// TestMCPTermScreenBounded: a terminal whose scrollback holds several MB.
// term_screen and term_wait asking for all of it get the head and the
// tail of it, whole rows, one row between saying what was left out and
// where the whole is, and the whole screen; the file holds exactly what
// `corral term screen --scrollback -1` prints. Bad max_output_bytes are
// tool errors.
func TestMCPTermScreenBounded(t *testing.T) {
	e := newDaemonEnv(t)
	cs, _ := mcpClient(t, e)
	// 66 bytes each: 3.3 MB of scrollback. (awk, not seq -f: busybox's
	// seq, in the VM, has no -f.)
	const rows = 50000
	if r := call(t, cs, "term_open", map[string]any{"name": "big", "size": "80x24", "command": []string{"sh", "-c",
		"awk 'BEGIN { for (i = 1; i <= " + strconv.Itoa(rows) + "; i++) printf \"row %06d abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345\\n\", i }'; echo THE-END; exec sleep 1000"}}, nil); r.IsError {
		t.Fatalf("term_open: %s", text(r))
	}
	if r := call(t, cs, "term_wait", map[string]any{"name": "big", "text": "^THE-END$", "timeout_ms": 55000}, nil); r.IsError {
		t.Fatalf("term_wait: %s", text(r))
	}
	whole, errs, rc := e.run("term", "screen", "big", "--scrollback", "-1")
	if rc != 0 || len(whole) < 3<<20 {
		t.Fatalf("corral term screen: rc %d, %d bytes, %s", rc, len(whole), errs)
	}
	var plain mcpserver.TermScreenOutput
	call(t, cs, "term_screen", map[string]any{"name": "big"}, &plain)
	if plain.Truncated || !strings.Contains(plain.Text, "THE-END\n") || !strings.HasSuffix(whole, plain.Text) {
		t.Fatalf("the screen alone: %+v", plain)
	}

	check := func(what string, r *mcp.CallToolResult, o *mcpserver.TermScreenOutput, max int) {
		t.Helper()
		if r.IsError {
			t.Fatalf("%s: %s", what, text(r))
		}
		marker := -1
		for i, row := range o.Scrollback {
			if strings.HasPrefix(row, "[corral: ") {
				marker = i
			}
		}
		if !o.Truncated || marker < 0 || o.Text != plain.Text || o.OutputFile == "" {
			t.Fatalf("%s: truncated %v, marker row %d, screen whole %v, output_file %q", what, o.Truncated, marker, o.Text == plain.Text, o.OutputFile)
		}
		m := o.Scrollback[marker]
		head, tail := o.Scrollback[:marker], o.Scrollback[marker+1:]
		var kept int
		for _, row := range o.Scrollback {
			kept += len(row) + 1
		}
		kept -= len(m) + 1
		kept += len(o.Text)
		if max < len(o.Text) {
			max = len(o.Text)
		}
		// The rows kept are whole, the first and the last ones, and come to
		// at most max bytes (a row at most short of each half).
		if kept > max || kept < max-2*67 || int64(kept)+o.OmittedBytes != int64(len(whole)) {
			t.Errorf("%s: kept %d (max %d) + omitted %d != %d", what, kept, max, o.OmittedBytes, len(whole))
		}
		if !strings.HasPrefix(whole, strings.Join(head, "\n")) || !strings.HasSuffix(whole, strings.Join(tail, "\n")+"\n"+o.Text) {
			t.Errorf("%s: the rows kept are not the head and tail of the whole: head %q... tail ...%q, whole %q...%q", what,
				head[:min(2, len(head))], tail[len(tail)-min(2, len(tail)):], whole[:min(200, len(whole))], whole[len(whole)-min(300, len(whole)):])
		}
		if !strings.Contains(m, strconv.FormatInt(o.OmittedBytes, 10)+" bytes left out") || !strings.Contains(m, "in output_file "+o.OutputFile) {
			t.Errorf("%s: marker row %q", what, m)
		}
		if got := text(r); !strings.Contains("\n"+got, "\n"+m+"\n") || len(got) > max+len(m)+200 {
			t.Errorf("%s: text reply of %d bytes: %q", what, len(got), got)
		}
		b, err := os.ReadFile(o.OutputFile)
		fi, _ := os.Stat(o.OutputFile)
		if err != nil || string(b) != whole || fi.Mode().Perm() != 0o600 || filepath.Dir(o.OutputFile) != filepath.Join(e.state, "mcp-output") {
			t.Errorf("%s: output_file %s: %d bytes (want %d), %v", what, o.OutputFile, len(b), len(whole), err)
		}
	}
	for _, max := range []int{0, 100, 5000, mcpserver.MaxReplyBytes} {
		args := map[string]any{"name": "big", "scrollback": -1}
		if max != 0 {
			args["max_output_bytes"] = max
		} else {
			max = mcpserver.DefaultMaxOutput
		}
		var o mcpserver.TermScreenOutput
		r := call(t, cs, "term_screen", args, &o)
		check(fmt.Sprintf("term_screen max %d", max), r, &o, max)
		t.Logf("max_output_bytes %d: a text reply of %d bytes, %d left out, of %d", max, len(text(r)), o.OmittedBytes, len(whole))
		if max == 100 && len(o.Scrollback) != 1 {
			t.Errorf("max 100: scrollback rows kept beside the screen: %q", o.Scrollback)
		}
	}
	var w mcpserver.TermWaitOutput
	r := call(t, cs, "term_wait", map[string]any{"name": "big", "idle_ms": 1, "timeout_ms": 5000, "scrollback": -1, "max_output_bytes": "4000"}, &w)
	check("term_wait", r, w.Screen, 4000)
	// Some of the scrollback, under the bound: as asked, not cut.
	var o mcpserver.TermScreenOutput
	if r := call(t, cs, "term_screen", map[string]any{"name": "big", "scrollback": 30}, &o); r.IsError || o.Truncated || len(o.Scrollback) != 30 {
		t.Errorf("30 rows: %d rows, truncated %v", len(o.Scrollback), o.Truncated)
	}

	for _, tool := range []string{"term_screen", "term_wait"} {
		for _, v := range []any{-1, 0, 99, mcpserver.MaxReplyBytes + 1, int64(1) << 40, "lots"} {
			args := map[string]any{"name": "big", "max_output_bytes": v, "idle_ms": 1}
			if tool == "term_screen" {
				delete(args, "idle_ms")
			}
			r := call(t, cs, tool, args, nil)
			want := "max_output_bytes must be between 100 and 524288"
			if v == "lots" {
				want = "max_output_bytes"
			}
			if !r.IsError || !strings.Contains(text(r), want) {
				t.Errorf("%s max_output_bytes %v: isError %v, %q", tool, v, r.IsError, text(r))
			}
		}
	}
}
