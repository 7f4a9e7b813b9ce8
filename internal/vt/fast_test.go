package vt

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// FuzzFastPath checks that the fast paths change nothing: the same
// stream, cut at the same place, leaves a terminal taking runs of ASCII
// and whole UTF-8 sequences at once in exactly the state of one taking
// every byte alone; and that every row, frozen into the scrollback's
// compact form, renders as the row itself does.
func FuzzFastPath(f *testing.F) {
	for _, s := range splitStreams() {
		f.Add(s[:min(len(s), 2000)], uint8(30), uint8(8), uint16(7))
	}
	f.Add(plainText(4000), uint8(80), uint8(24), uint16(333))
	f.Add(colourText(4000), uint8(80), uint8(24), uint16(1000))
	f.Add([]byte("\x1b[4hins\x1b[4l\x1b(0lqqk\x1b(B\x1b[31mred\x1b[m\x0e abc\x0f e\u0301 \u4e16\u754c"), uint8(9), uint8(3), uint16(5))
	f.Fuzz(fastOne)
}

func fastOne(t *testing.T, data []byte, cols, rows uint8, cut uint16) {
	c, r := int(cols%100)+1, int(rows%40)+1
	fast := New(c, r, Options{ScrollbackBytes: 1 << 16})
	slow := New(c, r, Options{ScrollbackBytes: 1 << 16})
	slow.slow = true
	k := min(int(cut), len(data))
	for _, v := range []*Terminal{fast, slow} {
		v.Write(data[:k])
		v.Write(data[k:])
	}
	if g, w := snapshot(fast), snapshot(slow); g != w {
		t.Fatalf("fast path state\n%q\nbyte at a time\n%q", g, w)
	}
	var h history
	for i, l := range fast.cur.lines {
		if !l.rich {
			for x, c := range l.cells {
				if c.Wide != 0 || c.Style != (Style{}) || c.R >= 0x80 || (c.R != 0 && c.R < 0x20) || l.comb != nil {
					t.Fatalf("row %d is marked plain but cell %d is %+v (combining marks %v)", i, x, c, l.comb)
				}
			}
		}
		hl := h.encode(l)
		if g, w := histRuns(hl), lineRuns(l); g != w {
			t.Fatalf("row %d frozen has the runs\n%s\nthe row itself\n%s", i, g, w)
		}
		if g, w := string(trimSpaces([]byte(hl.decode(nil)), 0)), string(trimSpaces(appendPlain(nil, l), 0)); g != w {
			t.Fatalf("row %d frozen text %q, the row's %q", i, g, w)
		}
		if hl.wrapped() != l.wrapped {
			t.Fatalf("row %d: wrapped %v frozen, %v on the screen", i, hl.wrapped(), l.wrapped)
		}
	}
}

// TestFastPathCorpus runs the differential check on the recorded streams
// of the oracle tests and on the benchmarks' texts, whole.
func TestFastPathCorpus(t *testing.T) {
	streams := splitStreams()
	streams = append(streams, plainText(64<<10), colourText(64<<10), bytes.Repeat([]byte("y\r\n"), 5000))
	for i, s := range streams {
		for _, size := range [][2]uint8{{80, 24}, {7, 3}, {132, 50}} {
			fastOne(t, s, size[0]-1, size[1]-1, uint16(i*977))
		}
	}
}

// lineRuns and histRuns list a row's style runs and their text, adjacent
// runs of one style merged, for comparing a row with its frozen form.
func lineRuns(l *line) string {
	var runs []run
	for i, c := range l.cells[:styledEnd(l)] {
		if c.Wide == wideTail {
			continue
		}
		runs = addRun(runs, c.Style, string(l.appendText(nil, i)))
	}
	return fmtRuns(runs)
}

func histRuns(hl histLine) string {
	var runs []run
	hl.decode(func(st Style, text string) { runs = addRun(runs, st, text) })
	return fmtRuns(runs)
}

type run struct {
	st   Style
	text string
}

func addRun(runs []run, st Style, text string) []run {
	if text == "" {
		return runs
	}
	if n := len(runs); n > 0 && runs[n-1].st == st {
		runs[n-1].text += text
		return runs
	}
	return append(runs, run{st, text})
}

func fmtRuns(runs []run) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "%+v %q\n", r.st, r.text)
	}
	return b.String()
}
