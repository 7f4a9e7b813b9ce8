package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func rowsText(n, width int, prefix string) []string {
	rows := make([]string, n)
	for i := range rows {
		r := fmt.Sprintf("%s %06d ", prefix, i)
		rows[i] = r + strings.Repeat("x", width-len(r))
	}
	return rows
}

func TestCutAtRows(t *testing.T) {
	text := []byte(strings.Join(rowsText(100, 20, "r"), "\n") + "\n") // 2100 bytes, rows of 21
	read := func(from, to int64) ([]byte, bool) { return text[from:to], true }
	c := cut(read, 0, int64(len(text)), 100, 100, true)
	head, tail := string(c.head), string(c.tail)
	if len(head) != 84 || len(tail) != 84 || !strings.HasPrefix(head, "r 000000 ") || !strings.HasSuffix(tail, "r 000099 xxxxxxxxxxx\n") ||
		!strings.HasPrefix(tail, "r 000096 ") || c.omitted != int64(len(text))-168 {
		t.Fatalf("cut at rows: head %q tail %q omitted %d", head, tail, c.omitted)
	}
	j := c.join("in output_file F")
	want := head + fmt.Sprintf("[corral: %d bytes left out here (bytes 84 to %d of the output), in output_file F]\n", c.omitted, len(text)-84) + tail
	if j != want {
		t.Errorf("joined:\n%s\nwant:\n%s", j, want)
	}
	// A row longer than the part is cut within it (and at a character).
	long := []byte(strings.Repeat("é", 500) + "\n")
	c = cut(func(from, to int64) ([]byte, bool) { return long[from:to], true }, 0, int64(len(long)), 51, 51, true)
	if len(c.head) != 50 || len(c.tail) != 51 || !strings.HasSuffix(string(c.tail), "é\n") ||
		!strings.Contains(c.join("w"), "é\n[corral: ") {
		t.Errorf("a long row: head %d tail %d %q", len(c.head), len(c.tail), c.join("w"))
	}
	// Without rows it is exec's cut, byte for byte.
	c = cut(read, 0, int64(len(text)), 100, 100, false)
	if len(c.head) != 100 || len(c.tail) != 100 || !strings.HasPrefix(c.join("w"), string(text[:100])+"\n[corral: ") {
		t.Errorf("exec's cut: %q", c.join("w"))
	}
}

// testServer is a Server on state with no daemon: enough for what
// boundScreen does.
func testServer(t *testing.T, state string) *Server {
	s, err := New(Config{StateDir: state, Dir: "/", Env: []string{},
		Dial: func(context.Context) (Daemon, error) { return nil, errors.New("no daemon in this test") }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func whole(o *TermScreenOutput) string {
	var b strings.Builder
	for _, r := range o.Scrollback {
		b.WriteString(r + "\n")
	}
	return b.String() + o.Text
}

func TestBoundScreen(t *testing.T) {
	s := testServer(t, t.TempDir())
	screen := strings.Join(rowsText(24, 79, "screen"), "\n") + "\n" // 1920 bytes
	scroll := rowsText(20000, 49, "back")                           // 1 MB
	full := strings.Join(scroll, "\n") + "\n" + screen

	// A small one is left alone.
	o := &TermScreenOutput{Text: screen, Scrollback: scroll[:10]}
	s.boundScreen("t", o, DefaultMaxOutput)
	if o.Truncated || o.OutputFile != "" || len(o.Scrollback) != 10 || o.Text != screen {
		t.Errorf("a small screen: %+v", o)
	}

	// The default: head and tail of the scrollback, the whole screen.
	o = &TermScreenOutput{Text: screen, Scrollback: scroll}
	s.boundScreen("t", o, DefaultMaxOutput)
	got := whole(o)
	marker := -1
	for i, r := range o.Scrollback {
		if strings.HasPrefix(r, "[corral: ") {
			marker = i
		}
	}
	if !o.Truncated || o.Text != screen || marker < 1 || o.Scrollback[0] != scroll[0] ||
		o.Scrollback[len(o.Scrollback)-1] != scroll[len(scroll)-1] {
		t.Fatalf("bounded: truncated %v, marker row %d, %d rows, screen whole %v", o.Truncated, marker, len(o.Scrollback), o.Text == screen)
	}
	kept := len(got) - len(o.Scrollback[marker]) - 1
	if kept > DefaultMaxOutput || kept < DefaultMaxOutput-2*50 || int64(kept)+o.OmittedBytes != int64(len(full)) {
		t.Errorf("kept %d + omitted %d, of %d", kept, o.OmittedBytes, len(full))
	}
	// Every row is whole, and they are the first and the last of the text.
	head, tail := o.Scrollback[:marker], o.Scrollback[marker+1:]
	if strings.Join(head, "\n") != strings.Join(scroll[:len(head)], "\n") ||
		strings.Join(tail, "\n") != strings.Join(scroll[len(scroll)-len(tail):], "\n") {
		t.Error("the rows kept are not the first and the last ones, whole")
	}
	if b, err := os.ReadFile(o.OutputFile); err != nil || string(b) != full || !strings.Contains(o.Scrollback[marker], o.OutputFile) {
		t.Errorf("output_file %s: %d bytes, %v (want %d)", o.OutputFile, len(b), err, len(full))
	}

	// A max smaller than the screen: the screen whole, no scrollback row
	// but the one saying so.
	o = &TermScreenOutput{Text: screen, Scrollback: scroll}
	s.boundScreen("t", o, 100)
	if !o.Truncated || o.Text != screen || len(o.Scrollback) != 1 || o.OmittedBytes != int64(len(full)-len(screen)) ||
		!strings.Contains(o.Scrollback[0], fmt.Sprintf("bytes 0 to %d of the output", len(full)-len(screen))) {
		t.Errorf("max 100: %+v", o.Scrollback)
	}
	// No scrollback and a screen under MaxReplyBytes: never cut.
	o = &TermScreenOutput{Text: screen}
	s.boundScreen("t", o, 100)
	if o.Truncated || o.Text != screen {
		t.Errorf("a screen alone was cut: %+v", o)
	}

	// A screen past MaxReplyBytes (4096x200) is cut to its last rows.
	big := strings.Join(rowsText(200, 4096, "big"), "\n") + "\n"
	o = &TermScreenOutput{Text: big, Scrollback: scroll[:5]}
	s.boundScreen("t", o, DefaultMaxOutput)
	first, rest, _ := strings.Cut(o.Text, "\n")
	if !o.Truncated || o.Scrollback != nil || !strings.HasPrefix(first, "[corral: ") || len(rest) > MaxReplyBytes ||
		len(rest) < MaxReplyBytes-4097 || !strings.HasSuffix(big, rest) || !strings.HasPrefix(rest, "big ") {
		t.Errorf("a huge screen: %q... (%d bytes)", first, len(rest))
	}
}

// TestBoundScreenNoOutputDir: with no mcp-output/ to write to, the reply
// is cut all the same and says the whole was not kept.
func TestBoundScreenNoOutputDir(t *testing.T) {
	state := t.TempDir()
	if err := os.WriteFile(state+"/mcp-output", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := testServer(t, state)
	o := &TermScreenOutput{Text: "$ \n", Scrollback: rowsText(1000, 60, "r")}
	s.boundScreen("t", o, 1000)
	if !o.Truncated || o.OutputFile != "" || o.Text != "$ \n" || len(o.Scrollback) < 3 ||
		!strings.Contains(strings.Join(o.Scrollback, "\n"), "bytes left out here") || !strings.Contains(strings.Join(o.Scrollback, "\n"), "not kept") {
		t.Errorf("no output dir: %+v", o)
	}
}
