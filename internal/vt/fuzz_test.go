package vt

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzWrite feeds arbitrary bytes, in two Writes and at a size taken from
// the input, and checks what must hold whatever a program sends: no
// panic, the cursor on the screen, one text row per screen row, valid
// UTF-8 out, and a Redraw that a second terminal reproduces.
func FuzzWrite(f *testing.F) {
	for _, s := range splitStreams() {
		f.Add(s[:min(len(s), 2000)], uint8(30), uint8(8), uint16(7))
	}
	f.Fuzz(fuzzOne)
}

func fuzzOne(t *testing.T, data []byte, cols, rows uint8, cut uint16) {
	{
		c, r := int(cols%100)+1, int(rows%40)+1
		v := New(c, r, Options{ScrollbackBytes: 4096})
		k := min(int(cut), len(data))
		v.Write(data[:k])
		if int(cut)%3 == 0 {
			v.Resize(r+3, c)
		}
		v.Write(data[k:])
		c, r = v.Size()
		x, y, _ := v.Cursor()
		if x < 0 || x >= c || y < 0 || y >= r {
			t.Fatalf("cursor %d,%d outside %dx%d", x, y, c, r)
		}
		text := v.Text()
		if n := strings.Count(text, "\n"); n != r {
			t.Fatalf("%d text rows for %d screen rows", n, r)
		}
		if !utf8.ValidString(text) || !utf8.ValidString(v.ANSI()) {
			t.Fatal("invalid UTF-8 rendered")
		}
		if v.ScrollbackBytes() > 4096 {
			t.Fatalf("scrollback %d bytes over its budget", v.ScrollbackBytes())
		}
		w := New(c, r, Options{})
		w.Write(v.Redraw(RedrawOptions{}))
		if w.Text() != text {
			t.Fatalf("redraw shows\n%q\nwant\n%q", w.Text(), text)
		}
		w.Write(v.Reset())
		if m := w.Modes(); m.AltScreen || m.Mouse != 0 || m.BracketedPaste || m.KittyKeyboard != 0 {
			t.Fatalf("modes left after Reset: %+v", m)
		}
	}
}
