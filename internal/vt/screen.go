package vt

// line is one row of a screen. Rows are moved by pointer when the screen
// scrolls, so a scroll never copies the grid.
type line struct {
	cells []Cell
	// comb holds the combining marks that follow the character at a
	// column; nil for almost every line.
	comb map[int]string
	// wrapped reports that the text continued onto the next row by
	// autowrap (tmux's GRID_LINE_WRAPPED).
	wrapped bool
	// used bounds the written part: cells[used:] are all zero Cells, so
	// clearing and storing a short row never walks its whole width.
	used int
	// rich is set when a cell may hold a style, a wide or non-ASCII
	// character or a combining mark. While it is false every cell is
	// blank or printable ASCII in the default style, and freezing the
	// row into the scrollback is a copy of its bytes.
	rich bool
}

// touch records that cells before x may be non-zero.
func (l *line) touch(x int) {
	if x > l.used {
		l.used = min(x, len(l.cells))
	}
}

func newLine(cols int) *line { return &line{cells: make([]Cell, cols)} }

// clear blanks the line with the erase style st (only its background is
// kept: background colour erase).
func (l *line) clear(st Style) {
	l.rich = st.Bg != 0
	if st.Bg == 0 {
		clear(l.cells[:l.used])
		l.used = 0
	} else {
		blank := Cell{Style: Style{Bg: st.Bg}}
		for i := range l.cells {
			l.cells[i] = blank
		}
		l.used = len(l.cells)
	}
	l.comb = nil
	l.wrapped = false
}

// erase blanks columns [from, to) and repairs wide characters cut in half.
func (l *line) erase(from, to int, st Style) {
	if from < 0 {
		from = 0
	}
	if to > len(l.cells) {
		to = len(l.cells)
	}
	if from >= to {
		return
	}
	blank := Cell{Style: Style{Bg: st.Bg}}
	l.fixWide(from)
	l.fixWide(to)
	if st.Bg != 0 {
		l.rich = true
		l.touch(to)
	} else {
		to = min(to, l.used)
	}
	for i := from; i < to; i++ {
		l.cells[i] = blank
		if l.comb != nil {
			delete(l.comb, i)
		}
	}
}

// fixWide blanks the other half of a wide character that a change at
// column x (a write or an erase starting or ending there) breaks.
func (l *line) fixWide(x int) {
	if x <= 0 || x >= len(l.cells) {
		return
	}
	if l.cells[x].Wide == wideTail {
		l.cells[x-1] = Cell{Style: Style{Bg: l.cells[x-1].Style.Bg}}
		l.cells[x] = Cell{Style: Style{Bg: l.cells[x].Style.Bg}}
	}
}

// insertBlank shifts cells right of x by n, blanking [x, x+n).
func (l *line) insertBlank(x, n int, st Style) {
	w := len(l.cells)
	if x >= w || n <= 0 {
		return
	}
	if n > w-x {
		n = w - x
	}
	l.fixWide(x)
	l.touch(l.used + n)
	copy(l.cells[x+n:], l.cells[x:w-n])
	if l.comb != nil {
		l.comb = shiftComb(l.comb, x, n, w)
	}
	l.erase(x, x+n, st)
	if l.cells[w-1].Wide == wideLead {
		l.cells[w-1] = Cell{Style: Style{Bg: l.cells[w-1].Style.Bg}}
	}
}

// deleteCells removes n cells at x, shifting the rest left and blanking
// the end.
func (l *line) deleteCells(x, n int, st Style) {
	w := len(l.cells)
	if x >= w || n <= 0 {
		return
	}
	if n > w-x {
		n = w - x
	}
	l.fixWide(x)
	l.fixWide(x + n)
	copy(l.cells[x:], l.cells[x+n:])
	if l.comb != nil {
		l.comb = shiftComb(l.comb, x, -n, w)
	}
	l.erase(w-n, w, st)
}

// shiftComb moves the combining marks at columns >= x by d, dropping those
// that leave [x, w) or land on a deleted column.
func shiftComb(m map[int]string, x, d, w int) map[int]string {
	out := make(map[int]string, len(m))
	for k, v := range m {
		switch {
		case k < x:
			out[k] = v
		case d < 0 && k < x-d:
		default:
			if nk := k + d; nk >= x && nk < w {
				out[nk] = v
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// resize makes the line cols wide, truncating or padding with blanks.
func (l *line) resize(cols int) {
	if cols <= len(l.cells) {
		l.cells = l.cells[:cols:cols]
		l.used = min(l.used, cols)
		if cols > 0 && l.cells[cols-1].Wide == wideLead {
			l.cells[cols-1] = Cell{}
		}
		for k := range l.comb {
			if k >= cols {
				delete(l.comb, k)
			}
		}
		return
	}
	nc := make([]Cell, cols)
	copy(nc, l.cells)
	l.cells = nc
}

// screen is one grid: the main screen or the alternate one.
type screen struct {
	lines []*line
	// back is where rotateUp moves the window of lines along, so that a
	// scroll of the whole screen moves one pointer, not all of them.
	back []*line
	// saved is the DECSC cursor of this screen.
	saved savedCursor
	// kitty is this screen's kitty keyboard flag stack; the top is last.
	kitty []uint16
}

func newScreen(cols, rows int) *screen {
	s := &screen{lines: make([]*line, rows)}
	for i := range s.lines {
		s.lines[i] = newLine(cols)
	}
	return s
}

// rotateUp moves the top row to the bottom, the others up one.
func (s *screen) rotateUp() {
	ls := s.lines
	n := len(ls)
	l := ls[0]
	if cap(ls) == n {
		if len(s.back) < 2*n {
			s.back = make([]*line, 4*n)
		}
		copy(s.back, ls)
		clear(s.back[n:])
		ls = s.back[:n:len(s.back)]
	}
	ls = ls[1 : n+1]
	ls[n-1] = l
	s.lines = ls
}

func (s *screen) kittyFlags() uint16 {
	if len(s.kitty) == 0 {
		return 0
	}
	return s.kitty[len(s.kitty)-1]
}

// savedCursor is what DECSC saves.
type savedCursor struct {
	x, y     int
	style    Style
	origin   bool
	wrapNext bool
	charsets [2]charset
	gl       int
	set      bool
}

type charset uint8

const (
	charsetASCII charset = iota
	charsetDEC
)
