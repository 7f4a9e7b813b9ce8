package vt

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// snapshot is everything observable about a terminal, for comparing two.
func snapshot(v *Terminal) string {
	x, y, vis := v.Cursor()
	return fmt.Sprintf("%s\x00%s\x00%d,%d,%v,%v\x00%+v\x00%q\x00%q\x00%q", v.Text(), v.ANSI(), x, y, vis,
		v.WrapPending(), v.Modes(), v.Title(), v.Scrollback(-1, true), v.Replies())
}

// splitStreams are streams rich in sequences of every kind.
func splitStreams() [][]byte {
	var out [][]byte
	for _, c := range syntheticCases() {
		out = append(out, c.data)
	}
	out = append(out,
		[]byte("\x1b[?1000h\x1b[?1006h\x1b[?2004h\x1b[?1004h\x1b[>5u\x1b[=3;2u\x1b[?u\x1b[6n\x1b[c\x1b[>c"+
			"\x1b[?2026h\x1b[?1h\x1b=\x1b[4 q\x1bP1$r\x1b\\\x1b_Gi=1;AAAA\x1b\\\x1b^pm\x1b\\text\x1b[?1049h"),
		[]byte("\x1b[38:2::1:2:3mcolon\x1b[38;2;4;5;6msemi\x1b[58;5;9m\x1b[4:4mdotted\x1b[m é 世"),
	)
	return out
}

// TestSplitWrites checks that splitting a stream into two Writes at any
// byte, or into single bytes, gives the same terminal as one Write:
// escape sequences, OSC strings and UTF-8 may straddle Writes.
func TestSplitWrites(t *testing.T) {
	for si, s := range splitStreams() {
		// Long streams repeat themselves; their head is enough, and
		// keeps the test quadratic in a small number.
		s = s[:min(len(s), 3000)]
		whole := New(30, 8, Options{})
		whole.Write(s)
		want := snapshot(whole)
		for cut := 1; cut < len(s); cut++ {
			v := New(30, 8, Options{})
			v.Write(s[:cut])
			v.Write(s[cut:])
			if got := snapshot(v); got != want {
				t.Fatalf("stream %d cut at %d of %d (%q|%q): differs from one write\nwant %q\ngot  %q",
					si, cut, len(s), s[max(0, cut-8):cut], s[cut:min(len(s), cut+8)], want, got)
			}
		}
		v := New(30, 8, Options{})
		for i := range s {
			v.Write(s[i : i+1])
		}
		if got := snapshot(v); got != want {
			t.Fatalf("stream %d byte by byte differs from one write", si)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a\xffb", "a\uFFFDb"},
		{"a\xe2\x82b", "a\uFFFDb"},               // truncated, then ASCII
		{"a\xe2\x82\x1b[1mb", "a\uFFFDb"},        // truncated by an escape
		{"\xc0\xafx", "\uFFFD\uFFFDx"},           // overlong: 0xc0 never starts a sequence
		{"\xed\xa0\x80x", "\uFFFDx"},             // a surrogate, one replacement
		{"\xf4\x90\x80\x80x", "\uFFFDx"},         // past U+10FFFF
		{"\xe2\x82\xac", "€"},                    // valid
		{"\xc2\x9bq", "q"},                       // C1 CSI encoded in UTF-8: ignored, not executed
		{"\x80\x80\x80z", "\uFFFD\uFFFD\uFFFDz"}, // stray continuation bytes
	} {
		for _, split := range []bool{false, true} {
			v := New(20, 2, Options{})
			if split {
				for i := range len(c.in) {
					v.Write([]byte{c.in[i]})
				}
			} else {
				v.Write([]byte(c.in))
			}
			got := strings.SplitN(v.Text(), "\n", 2)[0]
			if got != c.want {
				t.Errorf("%q (split %v): got %q, want %q", c.in, split, got, c.want)
			}
		}
	}
}

// TestMalformedAndOverlong feeds sequences past every parser bound and
// checks that the parser keeps its bounds and recovers for the text after.
func TestMalformedAndOverlong(t *testing.T) {
	v := New(40, 4, Options{})
	var b bytes.Buffer
	b.WriteString("\x1b[")
	for range 100000 {
		b.WriteString("99999999;")
	}
	b.WriteString("mA")
	b.WriteString("\x1b]2;" + strings.Repeat("t", 1<<20) + "\aB")
	v.Write(b.Bytes())
	b.Reset()
	if len(v.Title()) != maxOSC-2 {
		t.Errorf("title kept %d bytes, want the bound %d", len(v.Title()), maxOSC-2)
	}
	b.WriteString("\x1bP" + strings.Repeat("d", 1<<20) + "\x1b\\C")
	b.WriteString("\x1b[1;2;3$$$$$$qD") // too many intermediates: ignored
	b.WriteString("\x1b[1?2hE")         // private marker after a param: ignored
	b.WriteString("\x1b[5\x18F")        // CAN aborts
	b.WriteString("\x1b]0;unterminated\x1b[1mG")
	b.WriteString("\x1b#\x1b(\x1b[H\x1b[3;3H") // ESC cut short by ESC
	v.Write(b.Bytes())
	if got := strings.SplitN(v.Text(), "\n", 2)[0]; got != "ABCDEFG" {
		t.Errorf("text after malformed sequences: %q, want ABCDEFG", got)
	}
	if cap(v.p.osc) > 2*maxOSC {
		t.Errorf("OSC buffer grew to %d bytes, bound %d", cap(v.p.osc), maxOSC)
	}
	if x, y, _ := v.Cursor(); x != 2 || y != 2 {
		t.Errorf("cursor at %d,%d after recovery, want 2,2", x, y)
	}
	// DEL does not print, and is ignored inside a sequence too (ESC DEL a
	// is ESC a).
	v = New(20, 2, Options{})
	v.Write([]byte("\x7fa\x7fb\x1b\x7fac"))
	if got := strings.SplitN(v.Text(), "\n", 2)[0]; got != "abc" {
		t.Errorf("got %q, want abc", got)
	}
}

func TestReplies(t *testing.T) {
	var got []string
	v := New(80, 24, Options{Reply: func(b []byte) { got = append(got, string(b)) }})
	v.Write([]byte("\x1b[5;10H\x1b[6n\x1b[5n\x1b[c\x1b[>c\x1b[>1u\x1b[?u\x1b[?2004h\x1b[?2004$p\x1b[?2026$p\x1b[?9999$p" +
		"\x1b[3;10r\x1b[?6h\x1b[2;4H\x1b[6n\x1b[?6n\x1b[18t"))
	want := []string{"\x1b[5;10R", "\x1b[0n", "\x1b[?62;22c", "\x1b[>1;10;0c", "\x1b[?1u", "\x1b[?2004;1$y",
		"\x1b[?2026;2$y", "\x1b[?9999;0$y", "\x1b[2;4R", "\x1b[?2;4R", "\x1b[8;24;80t"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replies %q\nwant %q", got, want)
	}
	// Without a callback the answers wait for Replies, bounded.
	v = New(80, 24, Options{})
	v.Write([]byte("\x1b[c\x1b[5n"))
	if r := string(v.Replies()); r != "\x1b[?62;22c\x1b[0n" {
		t.Errorf("Replies() = %q", r)
	}
	if r := v.Replies(); r != nil {
		t.Errorf("second Replies() = %q, want nothing", r)
	}
	v.Write(bytes.Repeat([]byte("\x1b[c"), 100000))
	if n := len(v.Replies()); n > maxReplies {
		t.Errorf("uncollected replies grew to %d bytes, bound %d", n, maxReplies)
	}
}

func TestModes(t *testing.T) {
	v := New(80, 24, Options{})
	v.Write([]byte("\x1b[?1h\x1b=\x1b[?2004h\x1b[?1004h\x1b[?1002h\x1b[?1006h\x1b[?2026h\x1b[?25l\x1b[4h\x1b[5 q\x1b[?12h" +
		"\x1b[>1u\x1b[>3u\x1b[=8;2u\x1b[?1049h\x1b[>4u"))
	m := v.Modes()
	want := Modes{AltScreen: true, CursorKeys: true, Keypad: true, Autowrap: true, Insert: true, BracketedPaste: true,
		Focus: true, SyncOutput: true, Mouse: MouseButton, MouseEncoding: 1006, KittyKeyboard: 4, CursorShape: 5,
		CursorBlink: true, ScrollBottom: 23}
	if m != want {
		t.Errorf("modes %+v\nwant  %+v", m, want)
	}
	// The main screen's kitty stack is its own: 1, then 3|8.
	v.Write([]byte("\x1b[?1049l"))
	if f := v.Modes().KittyKeyboard; f != 11 {
		t.Errorf("main screen kitty flags %d, want 11", f)
	}
	v.Write([]byte("\x1b[<u"))
	if f := v.Modes().KittyKeyboard; f != 1 {
		t.Errorf("after one pop %d, want 1", f)
	}
	v.Write([]byte("\x1b[<5u\x1b[?1000h\x1b[?1000l"))
	if m := v.Modes(); m.KittyKeyboard != 0 || m.Mouse != MouseOff {
		t.Errorf("after popping all and mouse off: %+v", m)
	}
}

// TestRedrawReproduces feeds a terminal's Redraw to a fresh terminal of the
// same size and checks that the copy shows the same screen, cursor, modes
// (but synchronized output) and title; then the Reset bytes put every
// mode back to the power-on state.
func TestRedrawReproduces(t *testing.T) {
	for i, s := range splitStreams() {
		src := New(30, 8, Options{})
		src.Write(s)
		src.Replies()
		dst := New(30, 8, Options{})
		dst.Write(src.Redraw(RedrawOptions{}))
		dst.Replies()
		wantModes := src.Modes()
		wantModes.SyncOutput = false
		if src.Text() != dst.Text() || src.ANSI() != dst.ANSI() {
			t.Errorf("stream %d: redraw shows\n%q\nwant\n%q", i, dst.ANSI(), src.ANSI())
		}
		sx, sy, sv := src.Cursor()
		dx, dy, dv := dst.Cursor()
		if sx != dx || sy != dy || sv != dv || src.WrapPending() != dst.WrapPending() {
			t.Errorf("stream %d: cursor %d,%d,%v,%v want %d,%d,%v,%v", i, dx, dy, dv, dst.WrapPending(), sx, sy, sv,
				src.WrapPending())
		}
		if dst.Modes() != wantModes {
			t.Errorf("stream %d: modes %+v\nwant %+v", i, dst.Modes(), wantModes)
		}
		if src.Title() != dst.Title() {
			t.Errorf("stream %d: title %q want %q", i, dst.Title(), src.Title())
		}
		if ss, ds := src.main.saved, dst.main.saved; ss.set && (ss.x != ds.x || ss.y != ds.y || ss.style != ds.style ||
			ss.charsets != ds.charsets || ss.gl != ds.gl) {
			t.Errorf("stream %d: saved cursor %+v want %+v", i, ds, ss)
		}
		if src.style != dst.style {
			t.Errorf("stream %d: pen %+v want %+v", i, dst.style, src.style)
		}
		dst.Write(src.Reset())
		if m, want := dst.Modes(), (Modes{Autowrap: true, CursorVisible: true, ScrollBottom: 7}); m != want {
			t.Errorf("stream %d: after Reset modes %+v\nwant %+v", i, m, want)
		}
		if dst.style != (Style{}) || dst.charsets != [2]charset{} || dst.gl != 0 {
			t.Errorf("stream %d: after Reset pen %+v charsets %v gl %d", i, dst.style, dst.charsets, dst.gl)
		}
	}
}

// TestRedrawScrollback checks that scrollback rows printed by Redraw reach
// the outer terminal's own scrollback, followed by the screen.
func TestRedrawScrollback(t *testing.T) {
	src := New(20, 5, Options{})
	for i := range 50 {
		fmt.Fprintf(src, "\x1b[3%dmrow %d\x1b[m\r\n", i%8, i)
	}
	src.Write([]byte("last"))
	dst := New(20, 5, Options{})
	dst.Write(src.Redraw(RedrawOptions{Scrollback: -1}))
	if src.Text() != dst.Text() || src.ANSI() != dst.ANSI() {
		t.Fatalf("screen after redraw:\n%s\nwant\n%s", dst.ANSI(), src.ANSI())
	}
	if g, w := dst.Scrollback(-1, true), src.Scrollback(-1, true); fmt.Sprint(g) != fmt.Sprint(w) {
		t.Fatalf("scrollback after redraw:\n%q\nwant\n%q", g, w)
	}
	if n := len(src.Scrollback(-1, false)); n != 46 {
		t.Fatalf("scrollback has %d rows, want 46", n)
	}
	if got := src.Scrollback(2, false); fmt.Sprint(got) != "[row 44 row 45]" {
		t.Fatalf("Scrollback(2) = %q", got)
	}
}

// TestScrollbackBudget checks that the scrollback stays within its byte
// budget, evicts the oldest rows whole and keeps the newest intact, and
// that its cost follows the content: short rows cost less than long ones.
func TestScrollbackBudget(t *testing.T) {
	const budget = 64 << 10
	v := New(80, 24, Options{ScrollbackBytes: budget})
	for i := range 20000 {
		fmt.Fprintf(v, "%06d %s\r\n", i, strings.Repeat("x", i%70))
	}
	if b := v.ScrollbackBytes(); b > budget || b < budget*3/4 {
		t.Errorf("scrollback cost %d, want near and at most %d", b, budget)
	}
	sb := v.Scrollback(-1, false)
	last := sb[len(sb)-1]
	if want := strings.TrimSpace(fmt.Sprintf("%06d %s", 19976, strings.Repeat("x", 19976%70))); last != want {
		t.Errorf("newest scrollback row %q, want %q", last, want)
	}
	for i, s := range sb {
		var n int
		fmt.Sscanf(s, "%06d", &n)
		if s != strings.TrimSpace(fmt.Sprintf("%06d %s", n, strings.Repeat("x", n%70))) || (i > 0 && n != 19976-len(sb)+1+i) {
			t.Fatalf("scrollback row %d is %q: not a whole row in order", i, s)
		}
	}
	short, long := New(80, 24, Options{}), New(80, 24, Options{})
	for range 1000 {
		short.Write([]byte("y\r\n"))
		long.Write([]byte(strings.Repeat("y", 80) + "\r\n"))
	}
	if s, l := short.ScrollbackBytes(), long.ScrollbackBytes(); s*2 > l {
		t.Errorf("1000 rows of 1 byte cost %d, of 80 bytes %d: cost does not follow content", s, l)
	}
	none := New(80, 24, Options{ScrollbackBytes: -1})
	none.Write(bytes.Repeat([]byte("y\r\n"), 1000))
	if none.ScrollbackLen() != 0 {
		t.Errorf("scrollback disabled but holds %d rows", none.ScrollbackLen())
	}
	v.Write([]byte("\x1b[3J"))
	if v.ScrollbackLen() != 0 || v.ScrollbackBytes() != 0 {
		t.Errorf("after ED 3: %d rows, %d bytes", v.ScrollbackLen(), v.ScrollbackBytes())
	}
}

func TestWideAndCombining(t *testing.T) {
	v := New(10, 3, Options{})
	v.Write([]byte("世界e\u0301\u0302x\r\n\x1b[2;1H1234567890"))
	if got := strings.SplitN(v.Text(), "\n", 2)[0]; got != "世界e\u0301\u0302x" {
		t.Errorf("row 0 %q", got)
	}
	c := v.cur.lines[0].cells
	if c[0].Wide != wideLead || c[1].Wide != wideTail || c[4].R != 'e' || c[5].R != 'x' {
		t.Errorf("cells %+v", c[:6])
	}
	// Overwriting either half of a wide character blanks the other.
	v.Write([]byte("\x1b[1;2Ha\x1b[1;3Hb"))
	if got := strings.SplitN(v.Text(), "\n", 2)[0]; got != " ab e\u0301\u0302x" {
		t.Errorf("after overwriting halves: %q", got)
	}
	// Combining marks move with their character on insert and delete.
	v.Write([]byte("\x1b[1;1H\x1b[2@"))
	if got := strings.SplitN(v.Text(), "\n", 2)[0]; got != "   ab e\u0301\u0302x" {
		t.Errorf("after ICH: %q", got)
	}
	v.Write([]byte("\x1b[1;1H\x1b[4P"))
	if got := strings.SplitN(v.Text(), "\n", 2)[0]; got != "b e\u0301\u0302x" {
		t.Errorf("after DCH: %q", got)
	}
	if !utf8.ValidString(v.ANSI()) {
		t.Error("ANSI is not valid UTF-8")
	}
}

func TestResize(t *testing.T) {
	v := New(20, 6, Options{})
	for i := range 6 {
		fmt.Fprintf(v, "row %d 世界\r\n", i)
	}
	v.Write([]byte("cursor"))
	v.Resize(7, 3)
	if got, want := v.Text(), "row 4\nrow 5\ncursor\n"; got != want {
		t.Errorf("after shrinking: %q, want %q (wide char cut at the edge blanked)", got, want)
	}
	if x, y, _ := v.Cursor(); x != 6 || y != 2 {
		t.Errorf("cursor %d,%d", x, y)
	}
	if sb := v.Scrollback(-1, false); len(sb) != 4 || sb[3] != "row 3 世界" {
		t.Errorf("rows pushed to the scrollback: %q", sb)
	}
	v.Resize(30, 5)
	if got, want := v.Text(), "row 4\nrow 5\ncursor\n\n\n"; got != want {
		t.Errorf("after growing: %q, want %q", got, want)
	}
	// Blank rows below the cursor go first, nothing to the scrollback.
	w := New(10, 10, Options{})
	w.Write([]byte("a\r\nb"))
	w.Resize(10, 4)
	if got := w.Text(); got != "a\nb\n\n\n" || w.ScrollbackLen() != 0 {
		t.Errorf("shrinking below the cursor: %q, %d rows of scrollback", got, w.ScrollbackLen())
	}
}

// TestKittyStacksRoundTrip checks that Redraw rebuilds each screen's kitty
// keyboard stack entry by entry and Reset pops exactly those entries.
func TestKittyStacksRoundTrip(t *testing.T) {
	src := New(20, 4, Options{})
	src.Write([]byte("\x1b[>1u\x1b[>3u\x1b[>7u\x1b[?1049h\x1b[>15u\x1b[>31u"))
	dst := New(20, 4, Options{})
	dst.Write(src.Redraw(RedrawOptions{}))
	if fmt.Sprint(dst.main.kitty) != "[1 3 7]" || dst.alt == nil || fmt.Sprint(dst.alt.kitty) != "[15 31]" {
		t.Fatalf("stacks after redraw: main %v, alt %v", dst.main.kitty, dst.alt)
	}
	dst.Write(src.Reset())
	if len(dst.main.kitty) != 0 || dst.alt != nil {
		t.Fatalf("after Reset: main stack %v, alternate screen still on: %v", dst.main.kitty, dst.alt != nil)
	}
	// A stack that the program pushed past maxKitty keeps its newest
	// entries.
	v := New(20, 4, Options{})
	for i := range 40 {
		fmt.Fprintf(v, "\x1b[>%du", i)
	}
	if len(v.main.kitty) != maxKitty || v.Modes().KittyKeyboard != 39 {
		t.Fatalf("stack of %d entries, top %d", len(v.main.kitty), v.Modes().KittyKeyboard)
	}
}
