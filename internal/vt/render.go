package vt

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text returns the visible screen as plain text the way `tmux
// capture-pane -p` prints it: every row, each followed by a newline, with
// trailing spaces trimmed; a wide character appears once.
func (t *Terminal) Text() string {
	var b []byte
	for _, l := range t.cur.lines {
		n := len(b)
		b = appendPlain(b, l)
		b = trimSpaces(b, n)
		b = append(b, '\n')
	}
	return string(b)
}

// ANSI returns the visible screen with its attributes as SGR sequences,
// like `tmux capture-pane -p -e`: one row a line, each row starting from
// the default style and ending in it, trailing default blanks trimmed.
func (t *Terminal) ANSI() string {
	var b []byte
	for _, l := range t.cur.lines {
		b = appendStyled(b, l)
		b = append(b, '\n')
	}
	return string(b)
}

// ScrollbackLen returns how many rows the scrollback holds.
func (t *Terminal) ScrollbackLen() int { return t.hist.len() }

// ScrollbackBytes returns what the scrollback's rows cost against the
// budget.
func (t *Terminal) ScrollbackBytes() int { return t.hist.bytes }

// Scrollback returns the newest n rows of the scrollback (all if n is
// larger or negative), oldest first, as plain text with trailing spaces
// trimmed. With ansi they carry their attributes as in ANSI.
func (t *Terminal) Scrollback(n int, ansi bool) []string {
	total := t.hist.len()
	if n < 0 || n > total {
		n = total
	}
	out := make([]string, 0, n)
	var b []byte
	for i := total - n; i < total; i++ {
		hl := t.hist.at(i)
		b = b[:0]
		if ansi {
			b = appendHistStyled(b, hl)
		} else {
			b = trimSpaces(append(b, hl.decode(nil)...), 0)
		}
		out = append(out, string(b))
	}
	return out
}

func trimSpaces(b []byte, from int) []byte {
	for len(b) > from && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// appendText appends the text of cell i of l: its rune (a space for an
// empty cell) and the combining marks on it. (Freezing a row into the
// history keeps its own copy of these lines: a call per cell there costs
// about a fifth of BenchmarkWritePlain.)
func (l *line) appendText(b []byte, i int) []byte {
	if r := l.cells[i].R; r == 0 {
		b = append(b, ' ')
	} else {
		b = utf8.AppendRune(b, r)
	}
	if l.comb != nil {
		b = append(b, l.comb[i]...)
	}
	return b
}

func appendPlain(b []byte, l *line) []byte {
	for i, c := range l.cells {
		if c.Wide == wideTail {
			continue
		}
		b = l.appendText(b, i)
	}
	return b
}

// styledEnd is where a row's content ends: past the last cell that is not
// a default blank.
func styledEnd(l *line) int {
	end := l.used
	for end > 0 {
		c := &l.cells[end-1]
		if (c.R != 0 && c.R != ' ') || c.Style != (Style{}) || (l.comb != nil && l.comb[end-1] != "") {
			break
		}
		end--
	}
	return end
}

func appendStyled(b []byte, l *line) []byte { return appendRow(b, l, false, false) }

// appendRow renders a row with SGR. With bce, a tail of blank cells that
// differ from the default only in background is drawn with EL in that
// background (background colour erase), as the program most likely drew
// it, rather than as spaces. With full, the row is drawn to its last
// cell, trailing spaces included, so that the outer terminal wraps after it.
func appendRow(b []byte, l *line, bce, full bool) []byte {
	var cur Style
	end := styledEnd(l)
	if full {
		end = len(l.cells)
	}
	tail := end
	if bce && end > 0 {
		bg := l.cells[end-1].Style
		if bg == (Style{Bg: bg.Bg}) {
			for tail > 0 && l.cells[tail-1].R == 0 && l.cells[tail-1].Wide == 0 && l.cells[tail-1].Style == bg &&
				(l.comb == nil || l.comb[tail-1] == "") {
				tail--
			}
		}
	}
	for i := 0; i < tail; i++ {
		c := l.cells[i]
		if c.Wide == wideTail {
			continue
		}
		if bce && c.R == 0 && c.Style.Bg != 0 && c.Style == (Style{Bg: c.Style.Bg}) {
			// A run of erased cells in a background: ECH, as drawn.
			j := i
			for j < tail && l.cells[j] == c && (l.comb == nil || l.comb[j] == "") {
				j++
			}
			if cur != c.Style {
				b = appendSGR(b, c.Style)
				cur = c.Style
			}
			b = append(b, "\x1b["...)
			b = strconv.AppendInt(b, int64(j-i), 10)
			b = append(b, "X\x1b["...)
			b = strconv.AppendInt(b, int64(j-i), 10)
			b = append(b, 'C')
			i = j - 1
			continue
		}
		if c.Style != cur {
			b = appendSGR(b, c.Style)
			cur = c.Style
		}
		b = l.appendText(b, i)
	}
	if tail < end {
		if st := l.cells[end-1].Style; cur != st {
			b = appendSGR(b, st)
			cur = st
		}
		b = append(b, "\x1b[K"...)
	}
	if cur != (Style{}) {
		b = append(b, "\x1b[0m"...)
	}
	return b
}

func appendHistStyled(b []byte, hl histLine) []byte {
	styled := false
	hl.decode(func(st Style, text string) {
		if st != (Style{}) || styled {
			b = appendSGR(b, st)
			styled = true
		}
		b = append(b, text...)
	})
	if styled {
		b = append(b, "\x1b[0m"...)
	}
	return b
}

// appendSGR appends the SGR sequence that sets exactly st, from any state.
func appendSGR(b []byte, st Style) []byte {
	b = append(b, "\x1b[0"...)
	a := st.Attr
	for _, f := range [...]struct {
		a Attr
		s string
	}{{Bold, ";1"}, {Dim, ";2"}, {Italic, ";3"}, {Blink, ";5"}, {Inverse, ";7"},
		{Hidden, ";8"}, {Strike, ";9"}, {Overline, ";53"}} {
		if a&f.a != 0 {
			b = append(b, f.s...)
		}
	}
	switch st.Underline {
	case UnderlineNone:
	case UnderlineSingle:
		b = append(b, ";4"...)
	default:
		b = append(b, ";4:"...)
		b = strconv.AppendInt(b, int64(st.Underline), 10)
	}
	b = appendColor(b, st.Fg, 30)
	b = appendColor(b, st.Bg, 40)
	b = appendColor(b, st.UlColor, 50)
	return append(b, 'm')
}

// appendColor appends ;<colour> for base 30 (fg), 40 (bg) or 50 (underline).
func appendColor(b []byte, c Color, base int) []byte {
	if c.IsDefault() {
		return b
	}
	if n, ok := c.Index(); ok {
		switch {
		case c&colorKind != colorANSI || base == 50:
		case n < 8:
			return strconv.AppendInt(append(b, ';'), int64(base+int(n)), 10)
		default:
			return strconv.AppendInt(append(b, ';'), int64(base+60+int(n)-8), 10)
		}
		b = strconv.AppendInt(append(b, ';'), int64(base+8), 10)
		b = append(b, ";5;"...)
		return strconv.AppendInt(b, int64(n), 10)
	}
	r, g, bl, _ := c.RGB()
	b = strconv.AppendInt(append(b, ';'), int64(base+8), 10)
	b = append(b, ";2;"...)
	b = strconv.AppendInt(b, int64(r), 10)
	b = append(b, ';')
	b = strconv.AppendInt(b, int64(g), 10)
	b = append(b, ';')
	return strconv.AppendInt(b, int64(bl), 10)
}

// lastFull reports whether the row's last cell holds a character, so that
// printing it leaves the outer terminal's cursor waiting to wrap.
func lastFull(l *line) bool {
	c := l.cells[len(l.cells)-1]
	return c.R != 0 || c.Wide == wideTail
}

// RedrawOptions says what Redraw includes.
type RedrawOptions struct {
	// Scrollback is how many of the newest scrollback rows to print
	// before the screen, so that they enter the outer terminal's own
	// scrollback; -1 means all of them.
	Scrollback int
}

// Redraw returns the bytes that repaint an outer terminal of the same
// size to this terminal's state: the scrollback rows asked for, the main
// screen, the alternate screen if it is active, then the modes the
// program set that concern the outer terminal (scroll region, origin,
// autowrap, insert, cursor keys, keypad, bracketed paste, focus, mouse,
// kitty keyboard flags per screen, cursor shape and visibility, title,
// charsets), the pen and the cursor, including a pending wrap.
// Synchronized output (2026) is never replayed; the repaint itself is
// wrapped in one synchronized update.
//
// It pushes the outer terminal's title (XTWINOPS 22) and the kitty
// keyboard flags; Reset pops them, so a holder pairs every Redraw sent to
// a client with a Reset when that client detaches.
func (t *Terminal) Redraw(o RedrawOptions) []byte {
	b := make([]byte, 0, t.cols*t.rows*2+256)
	b = append(b, "\x1b[?2026h\x1b[0m\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[20l\x1b(B\x1b)B\x0f\x1b[H\x1b[2J"...)

	// Scrollback then the main screen, printed as lines so that what
	// scrolls off enters the outer terminal's scrollback.
	if n := o.Scrollback; n != 0 {
		total := t.hist.len()
		if n < 0 || n > total {
			n = total
		}
		for i := total - n; i < total; i++ {
			hl := t.hist.at(i)
			b = appendHistStyled(b, hl)
			b = append(b, "\r\n"...)
		}
	}
	for i, l := range t.main.lines {
		// A row that wrapped into a non-empty one is drawn in full and
		// left to wrap in the outer terminal too, which then knows the
		// rows are one line.
		last := i == len(t.main.lines)-1
		joined := !last && l.wrapped && lastFull(l) && styledEnd(t.main.lines[i+1]) > 0
		b = appendRow(b, l, true, joined)
		if !last && !joined {
			b = append(b, "\r\n"...)
		}
	}
	b = t.appendKitty(b, t.main)
	if t.cur != t.alt || !t.altCursor {
		// The main screen's DECSC (on the alternate screen, 1049 below
		// saves it).
		b = t.appendSaved(b, t.main.saved)
	}
	if t.cur == t.alt {
		// The cursor the outer terminal saves on entering.
		sx, sy := t.main.saved.x, t.main.saved.y
		b = appendCUP(b, sy, sx)
		b = append(b, "\x1b[?1049h\x1b[H\x1b[2J"...)
		for i, l := range t.alt.lines {
			b = appendCUP(b, i, 0)
			b = appendRow(b, l, true, false)
		}
		b = t.appendSaved(b, t.alt.saved)
		b = t.appendKitty(b, t.alt)
	}

	if t.top != 0 || t.bot != t.rows-1 {
		b = append(b, "\x1b["...)
		b = strconv.AppendInt(b, int64(t.top+1), 10)
		b = append(b, ';')
		b = strconv.AppendInt(b, int64(t.bot+1), 10)
		b = append(b, 'r')
	}
	if t.modes.Origin {
		b = append(b, "\x1b[?6h"...)
	}
	// The cursor, re-creating a pending wrap by reprinting the last cell.
	if t.wrapNext {
		ln := t.cur.lines[t.y]
		x := t.cols - 1
		if ln.cells[x].Wide == wideTail && x > 0 {
			x--
		}
		b = t.appendCursor(b, x, t.y)
		b = appendSGR(b, ln.cells[x].Style)
		b = ln.appendText(b, x)
	} else {
		b = t.appendCursor(b, t.x, t.y)
	}
	md := t.modes
	if !md.Autowrap {
		b = append(b, "\x1b[?7l"...)
	}
	if md.Insert {
		b = append(b, "\x1b[4h"...)
	}
	if md.NewLine {
		b = append(b, "\x1b[20h"...)
	}
	if md.CursorKeys {
		b = append(b, "\x1b[?1h"...)
	}
	if md.Keypad {
		b = append(b, "\x1b="...)
	}
	if md.BracketedPaste {
		b = append(b, "\x1b[?2004h"...)
	}
	if md.Focus {
		b = append(b, "\x1b[?1004h"...)
	}
	if md.Mouse != MouseOff {
		b = appendDECSET(b, int(md.Mouse), true)
	}
	if md.MouseEncoding != 0 {
		b = appendDECSET(b, int(md.MouseEncoding), true)
	}
	if md.CursorShape != 0 {
		b = append(b, "\x1b["...)
		b = strconv.AppendInt(b, int64(md.CursorShape), 10)
		b = append(b, " q"...)
	}
	if md.CursorBlink {
		b = append(b, "\x1b[?12h"...)
	}
	b = append(b, "\x1b[22;0t"...)
	if t.title != "" {
		b = append(b, "\x1b]2;"...)
		b = append(b, strings.Map(dropControls, t.title)...)
		b = append(b, '\a')
	}
	if t.charsets[0] == charsetDEC {
		b = append(b, "\x1b(0"...)
	}
	if t.charsets[1] == charsetDEC {
		b = append(b, "\x1b)0"...)
	}
	if t.gl == 1 {
		b = append(b, 0x0e)
	}
	b = appendSGR(b, t.style)
	if !md.CursorVisible {
		b = append(b, "\x1b[?25l"...)
	}
	return append(b, "\x1b[?2026l"...)
}

// appendSaved makes the outer terminal's DECSC hold s: position, pen and
// charsets (origin mode is not replayed in it).
func (t *Terminal) appendSaved(b []byte, s savedCursor) []byte {
	if !s.set {
		return b
	}
	b = appendCUP(b, s.y, s.x)
	b = appendSGR(b, s.style)
	if s.charsets[0] == charsetDEC {
		b = append(b, "\x1b(0"...)
	}
	if s.charsets[1] == charsetDEC {
		b = append(b, "\x1b)0"...)
	}
	if s.gl == 1 {
		b = append(b, 0x0e)
	}
	b = append(b, "\x1b7\x1b[0m\x1b(B\x1b)B\x0f"...)
	return b
}

func dropControls(r rune) rune {
	if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
		return -1
	}
	return r
}

// appendCursor positions the cursor at x, y, relative to the scroll
// region when origin mode is on.
func (t *Terminal) appendCursor(b []byte, x, y int) []byte {
	if t.modes.Origin {
		y -= t.top
	}
	return appendCUP(b, y, x)
}

func appendCUP(b []byte, y, x int) []byte {
	b = append(b, "\x1b["...)
	b = strconv.AppendInt(b, int64(y+1), 10)
	b = append(b, ';')
	b = strconv.AppendInt(b, int64(x+1), 10)
	return append(b, 'H')
}

func appendDECSET(b []byte, m int, on bool) []byte {
	b = append(b, "\x1b[?"...)
	b = strconv.AppendInt(b, int64(m), 10)
	if on {
		return append(b, 'h')
	}
	return append(b, 'l')
}

// appendKitty pushes a screen's kitty keyboard flag stack, entry by entry,
// so that the outer terminal's stack is as deep as the program's.
func (t *Terminal) appendKitty(b []byte, s *screen) []byte {
	for _, f := range s.kitty {
		b = append(b, "\x1b[>"...)
		b = strconv.AppendInt(b, int64(f), 10)
		b = append(b, 'u')
	}
	return b
}

func appendKittyPop(b []byte, s *screen) []byte {
	if len(s.kitty) == 0 {
		return b
	}
	b = append(b, "\x1b[<"...)
	b = strconv.AppendInt(b, int64(len(s.kitty)), 10)
	return append(b, 'u')
}

// Reset returns the bytes that undo, in an outer terminal showing this
// terminal, every mode a program can set: it leaves synchronized output
// and the alternate screen, pops the kitty keyboard flags Redraw and the
// program pushed (per screen) and the title Redraw pushed, and turns off
// mouse reporting, focus events, bracketed paste, application cursor keys
// and keypad; it restores autowrap, origin, insert, the scroll region,
// charsets, the pen, the cursor shape and visibility, and leaves the
// cursor where the main screen has it. Modes are reset whether or not the
// program set them: a redundant reset costs a few bytes, a missed one
// leaves the user's terminal broken (zmx#26).
func (t *Terminal) Reset() []byte {
	b := make([]byte, 0, 256)
	b = append(b, "\x1b[?2026l"...)
	x, y := t.x, t.y
	if t.cur == t.alt {
		b = appendKittyPop(b, t.alt)
		b = append(b, "\x1b[?1049l"...)
		if t.altCursor {
			x, y = t.main.saved.x, t.main.saved.y
		}
	}
	b = appendKittyPop(b, t.main)
	b = append(b, "\x1b[?1l\x1b>\x1b[?2004l\x1b[?1004l"+
		"\x1b[?1003l\x1b[?1002l\x1b[?1000l\x1b[?9l\x1b[?1006l\x1b[?1015l\x1b[?1005l"+
		"\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[20l\x1b(B\x1b)B\x0f\x1b[0m\x1b[0 q\x1b[?12l\x1b[?25h\x1b[23;0t"...)
	return appendCUP(b, y, x)
}
