package vt

import "unicode/utf8"

// DefaultScrollbackBytes is the scrollback budget when Options leaves it 0.
const DefaultScrollbackBytes = 8 << 20

// Options configures a Terminal.
type Options struct {
	// ScrollbackBytes bounds the memory the scrollback may use, in bytes
	// of stored content (see Terminal's doc); 0 means
	// DefaultScrollbackBytes, a negative value keeps no scrollback.
	ScrollbackBytes int
	// Reply, if set, receives the bytes the terminal answers queries with
	// (device attributes, cursor position, mode reports), to be written
	// back to the PTY. It is called from within Write and must not call
	// back into the Terminal; the slice is only valid during the call.
	// Without Reply the answers accumulate until Replies is called.
	Reply func([]byte)
}

// MouseTracking is the mouse reporting mode a program asked for.
type MouseTracking uint16

// Mouse tracking modes, named by their DECSET numbers.
const (
	MouseOff    MouseTracking = 0
	MouseX10    MouseTracking = 9
	MouseNormal MouseTracking = 1000
	MouseButton MouseTracking = 1002
	MouseAny    MouseTracking = 1003
)

// Modes is the set of modes a program has set, as Terminal.Modes reports
// them.
type Modes struct {
	AltScreen      bool // 1049, 1047 or 47
	CursorKeys     bool // DECCKM (?1): application cursor keys
	Keypad         bool // DECKPAM (ESC =): application keypad
	Origin         bool // DECOM (?6)
	Autowrap       bool // DECAWM (?7)
	Insert         bool // IRM (4)
	NewLine        bool // LNM (20)
	CursorVisible  bool // DECTCEM (?25)
	CursorBlink    bool // ?12
	BracketedPaste bool // ?2004
	Focus          bool // ?1004
	SyncOutput     bool // ?2026: tracked, never replayed
	Mouse          MouseTracking
	MouseEncoding  uint16 // 0 (X10 bytes), 1005, 1006 or 1015
	KittyKeyboard  uint16 // current kitty keyboard flags of the active screen
	CursorShape    int    // DECSCUSR parameter, 0 = terminal default
	ScrollTop      int    // scroll region, 0-based inclusive
	ScrollBottom   int
}

// Terminal is a VT/xterm screen model: fed a program's output with Write,
// it keeps the grid, the cursor, the modes and a scrollback, and renders
// them as text, as text with attributes, or as the bytes that repaint
// another terminal to the same state.
//
// A Terminal is not safe for concurrent use; its holder serialises calls.
type Terminal struct {
	cols, rows int
	main, alt  *screen
	cur        *screen

	x, y     int
	wrapNext bool // the cursor is past the last column; the next print wraps
	style    Style
	top, bot int // scroll region
	tabs     []bool
	charsets [2]charset
	gl       int // 0: G0 is in GL, 1: G1 (SO)
	lastRune rune
	modes    Modes
	title    string
	// altCursor: the alternate screen was entered with 1049, which saved
	// the main screen's cursor to be restored on leaving.
	altCursor bool

	hist history

	reply   func([]byte)
	replies []byte

	p parser

	// slow turns off the fast paths of Write (runs of ASCII, whole UTF-8
	// sequences), for the tests that check they change nothing.
	slow bool
}

// New returns a cols×rows terminal (each at least 1) in its power-on state.
func New(cols, rows int, opts Options) *Terminal {
	cols, rows = max(cols, 1), max(rows, 1)
	budget := opts.ScrollbackBytes
	if budget == 0 {
		budget = DefaultScrollbackBytes
	}
	t := &Terminal{cols: cols, rows: rows, reply: opts.Reply}
	t.hist.budget = max(budget, 0)
	t.main = newScreen(cols, rows)
	t.cur = t.main
	t.resetState()
	return t
}

// resetState puts everything but the main grid's content, the scrollback
// and the size in the power-on state.
func (t *Terminal) resetState() {
	t.x, t.y, t.wrapNext = 0, 0, false
	t.style = Style{}
	t.top, t.bot = 0, t.rows-1
	t.setTabs()
	t.charsets = [2]charset{}
	t.gl = 0
	t.modes = Modes{Autowrap: true, CursorVisible: true, ScrollBottom: t.rows - 1}
	t.title = ""
	t.main.saved, t.main.kitty = savedCursor{}, nil
	t.alt = nil
	t.cur = t.main
}

func (t *Terminal) setTabs() {
	t.tabs = make([]bool, t.cols)
	for i := 8; i < t.cols; i += 8 {
		t.tabs[i] = true
	}
}

// Size returns the terminal's columns and rows.
func (t *Terminal) Size() (cols, rows int) { return t.cols, t.rows }

// Cursor returns the cursor's 0-based column and row and whether the
// program shows it. The column is cols-1 when a wrap is pending.
func (t *Terminal) Cursor() (x, y int, visible bool) { return t.x, t.y, t.modes.CursorVisible }

// WrapPending reports whether the cursor sits past the last character of
// its row, the next character going to the start of the next row (tmux
// reports the cursor at column cols then).
func (t *Terminal) WrapPending() bool { return t.wrapNext }

// Title returns the window title last set with OSC 0 or 2.
func (t *Terminal) Title() string { return t.title }

// Modes returns the modes currently set.
func (t *Terminal) Modes() Modes {
	m := t.modes
	m.KittyKeyboard = t.cur.kittyFlags()
	m.ScrollTop, m.ScrollBottom = t.top, t.bot
	return m
}

// Replies returns and forgets the answers to queries accumulated since the
// last call, when Options.Reply is not set.
func (t *Terminal) Replies() []byte {
	r := t.replies
	t.replies = nil
	return r
}

func (t *Terminal) sendReply(b []byte) {
	if t.reply != nil {
		t.reply(b)
		return
	}
	if len(t.replies)+len(b) <= maxReplies {
		t.replies = append(t.replies, b...)
	}
}

// maxReplies bounds the answers kept for Replies: a program that floods
// queries while no one collects them cannot grow memory.
const maxReplies = 64 << 10

// print puts r at the cursor, wrapping and inserting as the modes say.
func (t *Terminal) print(r rune) {
	if r < 0x80 && t.charsets[t.gl] == charsetDEC && r >= 0x5f && r <= 0x7e {
		r = decGraphics[r-0x5f]
	}
	w := 1
	if r >= 0x300 {
		w = runeWidth(r)
	}
	if w == 0 {
		t.combine(r)
		return
	}
	t.lastRune = r
	if t.wrapNext {
		t.wrapNext = false
		if t.modes.Autowrap {
			t.cur.lines[t.y].wrapped = true
			t.x = 0
			t.index()
		}
	}
	if w == 2 && t.x == t.cols-1 {
		if t.cols < 2 {
			return
		}
		if t.modes.Autowrap {
			ln := t.cur.lines[t.y]
			ln.erase(t.x, t.cols, t.style)
			ln.wrapped = true
			t.x = 0
			t.index()
		} else {
			t.x = t.cols - 2
		}
	}
	ln := t.cur.lines[t.y]
	if t.modes.Insert {
		ln.insertBlank(t.x, w, t.style)
	}
	cells := ln.cells
	x := t.x
	if cells[x].Wide != 0 || (w == 2 && cells[x+1].Wide == wideLead) {
		ln.fixWide(x)
		ln.fixWide(x + 1)
		if x+w < t.cols {
			ln.fixWide(x + w)
		}
	}
	if ln.comb != nil {
		delete(ln.comb, x)
		if w == 2 {
			delete(ln.comb, x+1)
		}
	}
	ln.touch(x + w)
	if r >= 0x80 || w != 1 || t.style != (Style{}) {
		ln.rich = true
	}
	if w == 1 {
		cells[x] = Cell{R: r, Style: t.style}
	} else {
		cells[x] = Cell{R: r, Wide: wideLead, Style: t.style}
		cells[x+1] = Cell{Wide: wideTail, Style: t.style}
	}
	if x+w >= t.cols {
		t.x = t.cols - 1
		t.wrapNext = t.modes.Autowrap
	} else {
		t.x = x + w
	}
}

// printASCII puts a run of printable ASCII at the cursor: the hot path of
// plain text, with no width or charset work per byte.
func (t *Terminal) printASCII(b []byte) {
	for len(b) > 0 {
		if t.wrapNext || t.modes.Insert || t.charsets[t.gl] != charsetASCII {
			t.print(rune(b[0]))
			b = b[1:]
			continue
		}
		ln := t.cur.lines[t.y]
		n := min(len(b), t.cols-t.x)
		cells := ln.cells[t.x : t.x+n]
		if cells[0].Wide == wideTail || cells[n-1].Wide == wideLead || ln.comb != nil {
			t.print(rune(b[0]))
			b = b[1:]
			continue
		}
		ln.touch(t.x + n)
		if t.style != (Style{}) {
			ln.rich = true
		}
		// Field by field: a Cell literal is built on the stack and
		// copied, and that copy's overlapping stores stall the load
		// that follows (store forwarding fails), which cost most of
		// the time of plain text.
		st := t.style
		for i, c := range b[:n] {
			p := &cells[i]
			p.R, p.Wide, p.Style = rune(c), 0, st
		}
		t.lastRune = rune(b[n-1])
		b = b[n:]
		if t.x+n >= t.cols {
			t.x = t.cols - 1
			t.wrapNext = t.modes.Autowrap
		} else {
			t.x += n
		}
	}
}

// combine attaches a zero-width character to the one before the cursor.
func (t *Terminal) combine(r rune) {
	x := t.x
	if !t.wrapNext {
		x--
	}
	if x < 0 {
		return
	}
	ln := t.cur.lines[t.y]
	if ln.cells[x].Wide == wideTail && x > 0 {
		x--
	}
	if ln.cells[x].R == 0 {
		return
	}
	ln.rich = true
	if ln.comb == nil {
		ln.comb = map[int]string{}
	}
	if len(ln.comb[x]) < 32 {
		ln.comb[x] += string(r)
	}
}

// index moves the cursor down one row, scrolling the region at its bottom.
func (t *Terminal) index() {
	switch {
	case t.y == t.bot:
		t.scrollUp(1)
	case t.y < t.rows-1:
		t.y++
	}
}

// reverseIndex moves the cursor up one row, scrolling at the region top.
func (t *Terminal) reverseIndex() {
	switch {
	case t.y == t.top:
		t.scrollDown(1)
	case t.y > 0:
		t.y--
	}
}

// scrollUp scrolls the region up n rows. On the main screen the rows
// leaving the top of the region go to the scrollback, whatever the region,
// as in tmux: the lines a program scrolls away under a fixed header are
// kept too.
func (t *Terminal) scrollUp(n int) {
	n = min(n, t.bot-t.top+1)
	if t.top == 0 && t.bot == t.rows-1 && (t.cur == t.main || t.cur == t.alt) {
		// The whole screen: the window of rows moves along.
		for range n {
			l := t.cur.lines[0]
			if t.cur == t.main {
				t.hist.push(l)
			}
			l.clear(t.style)
			t.cur.rotateUp()
		}
		return
	}
	ls := t.cur.lines
	for range n {
		l := ls[t.top]
		if t.cur == t.main {
			t.hist.push(l)
		}
		copy(ls[t.top:t.bot], ls[t.top+1:t.bot+1])
		l.clear(t.style)
		ls[t.bot] = l
	}
}

// scrollDown scrolls the region down n rows, blank rows entering at top.
func (t *Terminal) scrollDown(n int) {
	n = min(n, t.bot-t.top+1)
	ls := t.cur.lines
	for range n {
		l := ls[t.bot]
		copy(ls[t.top+1:t.bot+1], ls[t.top:t.bot])
		l.clear(t.style)
		ls[t.top] = l
	}
}

// moveTo puts the cursor at column x, row y (0-based, screen-relative),
// clamped to the screen, or to the region in origin mode.
func (t *Terminal) moveTo(x, y int) {
	t.wrapNext = false
	t.x = clamp(x, 0, t.cols-1)
	if t.modes.Origin {
		t.y = clamp(y, t.top, t.bot)
	} else {
		t.y = clamp(y, 0, t.rows-1)
	}
}

func clamp(v, lo, hi int) int {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

func (t *Terminal) saveCursor() {
	t.cur.saved = savedCursor{x: t.x, y: t.y, style: t.style, origin: t.modes.Origin,
		wrapNext: t.wrapNext, charsets: t.charsets, gl: t.gl, set: true}
}

func (t *Terminal) restoreCursor() {
	s := t.cur.saved
	if !s.set {
		s = savedCursor{}
	}
	t.style, t.modes.Origin, t.charsets, t.gl = s.style, s.origin, s.charsets, s.gl
	t.x, t.y = clamp(s.x, 0, t.cols-1), clamp(s.y, 0, t.rows-1)
	t.wrapNext = s.wrapNext && t.x == t.cols-1
}

// enterAlt switches to the alternate screen, cleared, as tmux does for
// 47, 1047 and 1049; 1049 also saves the cursor.
func (t *Terminal) enterAlt(saveCursor bool) {
	if t.cur == t.alt && t.alt != nil {
		return
	}
	if saveCursor {
		t.saveCursor()
	}
	t.altCursor = saveCursor
	t.alt = newScreen(t.cols, t.rows)
	for _, l := range t.alt.lines {
		l.clear(t.style)
	}
	t.cur = t.alt
	t.modes.AltScreen = true
}

// leaveAlt returns to the main screen, dropping the alternate one. With
// restoreCursor (1049) the saved cursor is restored even when the main
// screen was already showing, as xterm and tmux do.
func (t *Terminal) leaveAlt(restoreCursor bool) {
	if t.cur == t.alt && t.alt != nil {
		t.cur = t.main
		t.alt = nil
		t.modes.AltScreen = false
	}
	if restoreCursor {
		t.restoreCursor()
	}
}

// Resize changes the size. Nothing reflows: rows keep their content,
// truncated or padded on the right. Shrinking the height first drops
// blank rows below the cursor, then pushes rows off the top into the
// scrollback (main screen); growing it adds blank rows at the bottom.
// The scroll region is reset to the whole screen.
func (t *Terminal) Resize(cols, rows int) {
	cols, rows = max(cols, 1), max(rows, 1)
	if cols == t.cols && rows == t.rows {
		return
	}
	for _, s := range []*screen{t.main, t.alt} {
		if s == nil {
			continue
		}
		cy := t.y
		if s != t.cur {
			cy = s.saved.y
		}
		ls := s.lines
		for len(ls) > rows && len(ls)-1 > cy && isBlank(ls[len(ls)-1]) {
			ls = ls[:len(ls)-1]
		}
		for len(ls) > rows {
			if s == t.main {
				t.hist.push(ls[0])
			}
			ls = ls[1:]
			cy--
			if s == t.cur {
				t.y--
			} else {
				s.saved.y--
			}
		}
		ls = append([]*line(nil), ls...)
		for len(ls) < rows {
			ls = append(ls, newLine(cols))
		}
		for _, l := range ls {
			l.resize(cols)
		}
		s.lines = ls
		s.saved.x = clamp(s.saved.x, 0, cols-1)
		s.saved.y = clamp(s.saved.y, 0, rows-1)
	}
	t.cols, t.rows = cols, rows
	t.top, t.bot = 0, rows-1
	t.x, t.y = clamp(t.x, 0, cols-1), clamp(t.y, 0, rows-1)
	t.wrapNext = false
	old := t.tabs
	t.setTabs()
	copy(t.tabs, old)
}

func isBlank(l *line) bool {
	for _, c := range l.cells {
		if c.R != 0 && c.R != ' ' {
			return false
		}
	}
	return len(l.comb) == 0
}

// validRune reports whether a decoded rune may go on the screen.
func validRune(r rune) bool { return r != utf8.RuneError && r >= 0xa0 }
