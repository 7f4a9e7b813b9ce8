package vt

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// csiDispatch executes CSI [prefix] params [inter] final.
func (t *Terminal) csiDispatch(c byte) {
	p := &t.p
	var inter byte
	if p.ninter == 1 {
		inter = p.inter[0]
	} else if p.ninter > 1 {
		return
	}
	switch p.prefix {
	case '?':
		t.csiPrivate(c, inter)
		return
	case '>':
		switch {
		case c == 'c' && inter == 0: // DA2
			t.sendReply([]byte("\x1b[>1;10;0c"))
		case c == 'u' && inter == 0: // kitty: push flags
			s := t.cur
			if len(s.kitty) >= maxKitty {
				s.kitty = append(s.kitty[:0], s.kitty[1:]...)
			}
			s.kitty = append(s.kitty, uint16(t.param(0, 0)))
		case c == 'q' && inter == 0: // XTVERSION
			t.sendReply([]byte("\x1bP>|corral-vt\x1b\\"))
		}
		return
	case '<':
		if c == 'u' && inter == 0 { // kitty: pop n
			s := t.cur
			n := min(t.param(0, 1), len(s.kitty))
			s.kitty = s.kitty[:len(s.kitty)-n]
		}
		return
	case '=':
		if c == 'u' && inter == 0 { // kitty: set flags with mode
			s := t.cur
			f := uint16(t.param(0, 0))
			if len(s.kitty) == 0 {
				s.kitty = append(s.kitty, 0)
			}
			top := &s.kitty[len(s.kitty)-1]
			switch t.param(1, 1) {
			case 1:
				*top = f
			case 2:
				*top |= f
			case 3:
				*top &^= f
			}
		}
		return
	}
	switch inter {
	case ' ':
		if c == 'q' { // DECSCUSR
			t.modes.CursorShape = t.param(0, 0)
		}
		return
	case '!':
		if c == 'p' { // DECSTR
			t.softReset()
		}
		return
	case '$':
		if c == 'p' { // DECRQM, ANSI modes
			m := t.param(0, 0)
			st := 0
			switch m {
			case 4:
				st = setting(t.modes.Insert)
			case 20:
				st = setting(t.modes.NewLine)
			}
			t.sendReply([]byte("\x1b[" + strconv.Itoa(m) + ";" + strconv.Itoa(st) + "$y"))
		}
		return
	case 0:
	default:
		return
	}
	switch c {
	case '@':
		t.cur.lines[t.y].insertBlank(t.ex(), t.param(0, 1), t.style)
	case 'A':
		t.cursorUp(t.param(0, 1))
	case 'B', 'e':
		t.cursorDown(t.param(0, 1))
	case 'C', 'a':
		t.moveTo(t.x+t.param(0, 1), t.y)
	case 'D':
		// From a pending wrap tmux counts from column cols (xterm from
		// cols-1).
		t.moveTo(t.ex()-t.param(0, 1), t.y)
	case 'E':
		t.cursorDown(t.param(0, 1))
		t.x = 0
	case 'F':
		t.cursorUp(t.param(0, 1))
		t.x = 0
	case 'G', '`':
		t.moveTo(t.param(0, 1)-1, t.y)
	case 'H', 'f':
		t.cup(t.param(0, 1)-1, t.param(1, 1)-1)
	case 'I':
		t.tabForward(t.param(0, 1))
	case 'J':
		t.eraseDisplay(t.param(0, 0))
	case 'K':
		t.eraseLine(t.param(0, 0))
	case 'L':
		t.insertLines(t.param(0, 1))
	case 'M':
		t.deleteLines(t.param(0, 1))
	case 'P':
		t.cur.lines[t.y].deleteCells(t.ex(), t.param(0, 1), t.style)
	case 'S':
		t.scrollUp(t.param(0, 1))
	case 'T':
		if t.p.nparams <= 1 {
			t.scrollDown(t.param(0, 1))
		}
	case 'X':
		t.cur.lines[t.y].erase(t.ex(), t.ex()+t.param(0, 1), t.style)
	case 'Z':
		t.tabBackward(t.param(0, 1))
	case 'b': // REP
		if t.lastRune != 0 {
			for n := min(t.param(0, 1), t.cols*t.rows); n > 0; n-- {
				t.print(t.lastRune)
			}
		}
	case 'c':
		if t.param(0, 0) == 0 { // DA1: VT220 with ANSI colour
			t.sendReply([]byte("\x1b[?62;22c"))
		}
	case 'd':
		y := t.param(0, 1) - 1
		if t.modes.Origin {
			y += t.top
		}
		t.moveTo(t.x, y)
	case 'g':
		switch t.param(0, 0) {
		case 0:
			t.tabs[t.x] = false
		case 3:
			clear(t.tabs)
		}
	case 'h', 'l':
		on := c == 'h'
		for i := range t.p.nparams {
			switch t.p.params[i] {
			case 4:
				t.modes.Insert = on
			case 20:
				t.modes.NewLine = on
			}
		}
	case 'm':
		t.sgr()
	case 'n':
		switch t.param(0, 0) {
		case 5:
			t.sendReply([]byte("\x1b[0n"))
		case 6:
			t.sendReply([]byte("\x1b[" + t.cursorReport() + "R"))
		}
	case 'r':
		top, bot := t.param(0, 1)-1, t.param(1, t.rows)-1
		bot = min(bot, t.rows-1)
		if top < bot {
			// tmux homes to the screen's top left even in origin
			// mode (xterm to the region's).
			t.top, t.bot = top, bot
			t.x, t.y, t.wrapNext = 0, 0, false
		}
	case 's':
		t.saveCursor()
	case 'u':
		t.restoreCursor()
	case 't':
		if t.param(0, 0) == 18 { // text area size in characters
			t.sendReply([]byte("\x1b[8;" + strconv.Itoa(t.rows) + ";" + strconv.Itoa(t.cols) + "t"))
		}
	}
}

const maxKitty = 16

func setting(on bool) int {
	if on {
		return 1
	}
	return 2
}

func (t *Terminal) cursorReport() string {
	y := t.y
	if t.modes.Origin {
		y -= t.top
	}
	return strconv.Itoa(y+1) + ";" + strconv.Itoa(t.x+1)
}

// cup moves to row, col (0-based), relative to the region in origin mode.
func (t *Terminal) cup(row, col int) {
	if t.modes.Origin {
		row += t.top
	}
	t.moveTo(col, row)
}

// cursorUp stops at the region top if the cursor is inside the region.
func (t *Terminal) cursorUp(n int) {
	lo := 0
	if t.y >= t.top {
		lo = t.top
	}
	t.wrapNext = false
	t.y = max(t.y-n, lo)
}

func (t *Terminal) cursorDown(n int) {
	hi := t.rows - 1
	if t.y <= t.bot {
		hi = t.bot
	}
	t.wrapNext = false
	t.y = min(t.y+n, hi)
}

func (t *Terminal) eraseDisplay(mode int) {
	ls := t.cur.lines
	x := t.ex()
	switch mode {
	case 0:
		ls[t.y].erase(x, t.cols, t.style)
		for _, l := range ls[t.y+1:] {
			l.clear(t.style)
		}
	case 1:
		for _, l := range ls[:t.y] {
			l.clear(t.style)
		}
		ls[t.y].erase(0, x+1, t.style)
	case 2:
		t.pushScreen()
		for _, l := range ls {
			l.clear(t.style)
		}
	case 3:
		t.hist.clear()
	}
}

func (t *Terminal) eraseLine(mode int) {
	l := t.cur.lines[t.y]
	x := t.ex()
	switch mode {
	case 0:
		l.erase(x, t.cols, t.style)
	case 1:
		l.erase(0, x+1, t.style)
	case 2:
		l.erase(0, t.cols, t.style)
	}
}

// pushScreen stores the main screen's rows down to the last written one in
// the scrollback before a clear, as tmux does (scroll-on-clear).
func (t *Terminal) pushScreen() {
	if t.cur != t.main {
		return
	}
	last := 0
	for i, l := range t.main.lines {
		if styledEnd(l) > 0 {
			last = i + 1
		}
	}
	for _, l := range t.main.lines[:last] {
		t.hist.push(l)
	}
}

// ex is the cursor column the character erase, insert and delete
// operations act at: past the last column while a wrap is pending, so
// that they leave the last character alone and the wrap still happens,
// as in tmux (whose cursor is then at column cols).
func (t *Terminal) ex() int {
	if t.wrapNext {
		return t.cols
	}
	return t.x
}

// insertLines inserts n blank rows at the cursor row, inside the region.
func (t *Terminal) insertLines(n int) {
	if t.y < t.top || t.y > t.bot {
		return
	}
	top := t.top
	t.top = t.y
	t.scrollDown(n)
	t.top = top
	t.x, t.wrapNext = 0, false
}

func (t *Terminal) deleteLines(n int) {
	if t.y < t.top || t.y > t.bot {
		return
	}
	top, cur := t.top, t.cur
	t.top = t.y
	// Rows deleted inside the screen never go to the scrollback.
	t.cur = &screen{lines: cur.lines}
	t.scrollUp(n)
	t.cur = cur
	t.top = top
	t.x, t.wrapNext = 0, false
}

// softReset is DECSTR.
func (t *Terminal) softReset() {
	t.modes.CursorVisible = true
	t.modes.Origin = false
	t.modes.Autowrap = true
	t.modes.Insert = false
	t.modes.CursorKeys = false
	t.modes.Keypad = false
	t.top, t.bot = 0, t.rows-1
	t.style = Style{}
	t.charsets, t.gl = [2]charset{}, 0
	t.cur.saved = savedCursor{}
	t.wrapNext = false
}

// csiPrivate executes CSI ? ... final: DECSET, DECRST, DECRQM and friends.
func (t *Terminal) csiPrivate(c, inter byte) {
	p := &t.p
	switch {
	case (c == 'h' || c == 'l') && inter == 0:
		for i := range p.nparams {
			t.setMode(int(p.params[i]), c == 'h')
		}
	case c == 'n' && inter == 0 && t.param(0, 0) == 6: // DECXCPR
		t.sendReply([]byte("\x1b[?" + t.cursorReport() + "R"))
	case c == 'u' && inter == 0: // kitty: query flags
		t.sendReply([]byte("\x1b[?" + strconv.Itoa(int(t.cur.kittyFlags())) + "u"))
	case c == 'p' && inter == '$': // DECRQM
		m := t.param(0, 0)
		st := 0
		if on, known := t.privateMode(m); known {
			st = setting(on)
		}
		t.sendReply([]byte("\x1b[?" + strconv.Itoa(m) + ";" + strconv.Itoa(st) + "$y"))
	case c == 'J' && inter == 0: // DECSED: erase ignoring protection
		t.eraseDisplay(t.param(0, 0))
	case c == 'K' && inter == 0:
		t.eraseLine(t.param(0, 0))
	}
}

// privateMode reports a DEC private mode's setting, and whether it is one
// the terminal knows.
func (t *Terminal) privateMode(m int) (on, known bool) {
	md := &t.modes
	switch m {
	case 1:
		return md.CursorKeys, true
	case 6:
		return md.Origin, true
	case 7:
		return md.Autowrap, true
	case 12:
		return md.CursorBlink, true
	case 25:
		return md.CursorVisible, true
	case 9, 1000, 1002, 1003:
		return md.Mouse == MouseTracking(m), true
	case 1005, 1006, 1015:
		return md.MouseEncoding == uint16(m), true
	case 1004:
		return md.Focus, true
	case 47, 1047, 1049:
		return md.AltScreen, true
	case 2004:
		return md.BracketedPaste, true
	case 2026:
		return md.SyncOutput, true
	}
	return false, false
}

func (t *Terminal) setMode(m int, on bool) {
	md := &t.modes
	switch m {
	case 1:
		md.CursorKeys = on
	case 3: // DECCOLM: no resize; tmux (like xterm) homes and clears
		t.moveTo(0, 0)
		t.eraseDisplay(2)
	case 6:
		md.Origin = on
		t.cup(0, 0)
	case 7:
		md.Autowrap = on
		if !on {
			t.wrapNext = false
		}
	case 12:
		md.CursorBlink = on
	case 25:
		md.CursorVisible = on
	case 9, 1000, 1002, 1003:
		if on {
			md.Mouse = MouseTracking(m)
		} else {
			md.Mouse = MouseOff
		}
	case 1005, 1006, 1015:
		if on {
			md.MouseEncoding = uint16(m)
		} else if md.MouseEncoding == uint16(m) {
			md.MouseEncoding = 0
		}
	case 1004:
		md.Focus = on
	case 2004:
		md.BracketedPaste = on
	case 2026:
		md.SyncOutput = on
	case 47, 1047:
		if on {
			t.enterAlt(false)
		} else {
			t.leaveAlt(false)
		}
	case 1049:
		if on {
			t.enterAlt(true)
		} else {
			t.leaveAlt(true)
		}
	}
}

// sgr applies SGR parameters to the pen.
func (t *Terminal) sgr() {
	p := &t.p
	if p.nparams == 0 {
		t.style = Style{}
		return
	}
	st := &t.style
	for i := 0; i < p.nparams; i++ {
		v := p.params[i]
		// Colon sub-parameters belonging to this one.
		j := i + 1
		for j < p.nparams && p.sub&(1<<j) != 0 {
			j++
		}
		subs := p.params[i+1 : j]
		switch {
		case v == 0:
			*st = Style{}
		case v == 1:
			st.Attr |= Bold
		case v == 2:
			st.Attr |= Dim
		case v == 3:
			st.Attr |= Italic
		case v == 4:
			st.Underline = UnderlineSingle
			if len(subs) > 0 && subs[0] <= 5 {
				st.Underline = Underline(subs[0])
			}
		case v == 5 || v == 6:
			st.Attr |= Blink
		case v == 7:
			st.Attr |= Inverse
		case v == 8:
			st.Attr |= Hidden
		case v == 9:
			st.Attr |= Strike
		case v == 21:
			st.Underline = UnderlineDouble
		case v == 22:
			st.Attr &^= Bold | Dim
		case v == 23:
			st.Attr &^= Italic
		case v == 24:
			st.Underline = UnderlineNone
		case v == 25:
			st.Attr &^= Blink
		case v == 27:
			st.Attr &^= Inverse
		case v == 28:
			st.Attr &^= Hidden
		case v == 29:
			st.Attr &^= Strike
		case v >= 30 && v <= 37:
			st.Fg = ANSI(uint8(v - 30))
		case v == 39:
			st.Fg = 0
		case v >= 40 && v <= 47:
			st.Bg = ANSI(uint8(v - 40))
		case v == 49:
			st.Bg = 0
		case v == 53:
			st.Attr |= Overline
		case v == 55:
			st.Attr &^= Overline
		case v == 59:
			st.UlColor = 0
		case v >= 90 && v <= 97:
			st.Fg = ANSI(uint8(v - 90 + 8))
		case v >= 100 && v <= 107:
			st.Bg = ANSI(uint8(v - 100 + 8))
		case v == 38 || v == 48 || v == 58:
			var col Color
			var ok bool
			if len(subs) > 0 {
				col, ok = extColor(subs, true)
			} else {
				// Semicolon form: the colour takes the following params.
				var used int
				col, ok, used = extColorSemi(p.params[i+1 : p.nparams])
				j = i + 1 + used
			}
			if ok {
				switch v {
				case 38:
					st.Fg = col
				case 48:
					st.Bg = col
				default:
					st.UlColor = col
				}
			}
		}
		i = j - 1
	}
}

// extColor decodes the colon form: 5:n, or 2:[colourspace:]r:g:b.
func extColor(s []int32, colon bool) (Color, bool) {
	if len(s) == 0 {
		return 0, false
	}
	switch s[0] {
	case 5:
		if len(s) >= 2 && s[1] <= 255 {
			return Indexed(uint8(s[1])), true
		}
	case 2:
		rgb := s[1:]
		if colon && len(rgb) >= 4 {
			rgb = rgb[1:] // the colour space id
		}
		if len(rgb) >= 3 && rgb[0] <= 255 && rgb[1] <= 255 && rgb[2] <= 255 {
			return RGB(uint8(rgb[0]), uint8(rgb[1]), uint8(rgb[2])), true
		}
	}
	return 0, false
}

// extColorSemi decodes 5;n or 2;r;g;b and says how many params it used.
func extColorSemi(s []int32) (Color, bool, int) {
	if len(s) == 0 {
		return 0, false, 0
	}
	switch s[0] {
	case 5:
		if len(s) < 2 {
			return 0, false, len(s)
		}
		c, ok := extColor(s[:2], false)
		return c, ok, 2
	case 2:
		if len(s) < 4 {
			return 0, false, len(s)
		}
		c, ok := extColor(s[:4], false)
		return c, ok, 4
	}
	return 0, false, 1
}

// oscDispatch executes an operating system command: only the title is
// kept (OSC 0 and 2).
func (t *Terminal) oscDispatch() {
	s := t.p.osc
	num, rest, ok := strings.Cut(string(s), ";")
	t.p.osc = t.p.osc[:0]
	if !ok {
		return
	}
	switch num {
	case "0", "2":
		if !utf8.ValidString(rest) {
			rest = strings.ToValidUTF8(rest, "\uFFFD")
		}
		t.title = rest
	}
}
