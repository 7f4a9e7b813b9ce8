package vt

import (
	"math/bits"
	"unicode/utf8"
	"unsafe"
)

// histLine is a row that scrolled off the top of the main screen, stored
// by content in one string: a flags byte, then, if the row has any style,
// its style runs (count, then per run the byte length of its text and the
// style in styleSize bytes), then its text: trailing default blanks
// trimmed, a wide character once, combining marks after their base. A row
// costs its text, its runs and one string header; never its width.
type histLine string

const (
	histWrapped = 1 << iota
	histStyled
)

// styleSize is a Style's encoded length: three colours and the attributes.
const styleSize = 4 + 4 + 4 + 2 + 1

// slotCost is what a stored row costs in the ring beyond its bytes: two
// string headers, as compaction keeps the ring's capacity within about
// twice the live rows.
var slotCost = 2 * int(unsafe.Sizeof(histLine("")))

// allocSize estimates what the allocator spends on n bytes: its size
// classes step by 16 bytes up to 128, by 32 to 512, by 64 to 1024, then
// by about an eighth.
func allocSize(n int) int {
	switch {
	case n == 0:
		return 0
	case n <= 128:
		return (n + 15) &^ 15
	case n <= 512:
		return (n + 31) &^ 31
	case n <= 1024:
		return (n + 63) &^ 63
	}
	step := 1 << (bits.Len(uint(n)) - 3)
	return (n + step - 1) &^ (step - 1)
}

func (l histLine) wrapped() bool { return len(l) > 0 && l[0]&histWrapped != 0 }

// decode returns the row's text and calls run for each style run with the
// run's text.
func (l histLine) decode(run func(st Style, text string)) string {
	if len(l) == 0 {
		return ""
	}
	if l[0]&histStyled == 0 {
		if run != nil {
			run(Style{}, string(l[1:]))
		}
		return string(l[1:])
	}
	i := 1
	n, k := uvarint(l[i:])
	i += k
	type span struct {
		n  int
		st Style
	}
	var spans []span
	if run != nil {
		spans = make([]span, 0, n)
	}
	for range n {
		m, k := uvarint(l[i:])
		i += k
		if run != nil {
			spans = append(spans, span{m, decodeStyle(string(l[i : i+styleSize]))})
		}
		i += styleSize
	}
	text := string(l[i:])
	off := 0
	for _, sp := range spans {
		run(sp.st, text[off:off+sp.n])
		off += sp.n
	}
	return text
}

func uvarint(s histLine) (int, int) {
	v, shift := 0, 0
	for i := 0; i < len(s); i++ {
		v |= int(s[i]&0x7f) << shift
		if s[i] < 0x80 {
			return v, i + 1
		}
		shift += 7
	}
	return v, len(s)
}

func appendUvarint(b []byte, v int) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendStyle(b []byte, st Style) []byte {
	for _, c := range [3]Color{st.Fg, st.Bg, st.UlColor} {
		b = append(b, byte(c>>24), byte(c>>16), byte(c>>8), byte(c))
	}
	return append(b, byte(st.Attr>>8), byte(st.Attr), byte(st.Underline))
}

func decodeStyle(s string) Style {
	c := func(i int) Color {
		return Color(uint32(s[i])<<24 | uint32(s[i+1])<<16 | uint32(s[i+2])<<8 | uint32(s[i+3]))
	}
	return Style{Fg: c(0), Bg: c(4), UlColor: c(8), Attr: Attr(s[12])<<8 | Attr(s[13]), Underline: Underline(s[14])}
}

// history is the scrollback: stored rows, oldest first, with their cost
// in bytes kept at or under budget by evicting whole rows from the front.
type history struct {
	lines []histLine
	head  int // lines[:head] are evicted slots awaiting compaction
	// text and runs are encode's scratch space, reused row after row.
	text, runs []byte
	bytes      int
	budget     int
}

func (h *history) cost(l histLine) int { return allocSize(len(l)) + slotCost }

// push stores a copy of l.
func (h *history) push(l *line) {
	if h.budget <= 0 {
		return
	}
	hl := h.encode(l)
	c := h.cost(hl)
	if c > h.budget {
		return
	}
	if len(h.lines) == cap(h.lines) && h.head > 0 && h.head >= len(h.lines)/4 {
		// Full, a quarter or more evicted: compact rather than grow,
		// and give memory back when the rows have become few.
		live := h.lines[h.head:]
		if len(live) < cap(h.lines)/2 {
			h.lines = append(make([]histLine, 0, len(live)+len(live)/4+16), live...)
		} else {
			n := copy(h.lines, live)
			clear(h.lines[n:])
			h.lines = h.lines[:n]
		}
		h.head = 0
	}
	h.lines = append(h.lines, hl)
	h.bytes += c
	for h.bytes > h.budget {
		h.bytes -= h.cost(h.lines[h.head])
		h.lines[h.head] = ""
		h.head++
	}
}

func (h *history) clear() {
	h.lines, h.head, h.bytes = nil, 0, 0
}

func (h *history) len() int { return len(h.lines) - h.head }

// at returns stored row i, 0 being the oldest.
func (h *history) at(i int) histLine { return h.lines[h.head+i] }

// encode turns a grid row into its stored form.
func (h *history) encode(l *line) histLine {
	end := styledEnd(l)
	var flags byte
	if l.wrapped {
		flags |= histWrapped
	}
	if end == 0 && flags == 0 {
		return ""
	}
	if !l.rich {
		// Blank or ASCII in the default style: the text is the runes.
		// (Indexed, not ranged by value: the copy of each Cell to the
		// stack stalls the load of its rune.)
		b := make([]byte, 1+end)
		b[0] = flags
		cells := l.cells[:end]
		for i := range cells {
			if r := cells[i].R; r == 0 {
				b[1+i] = ' '
			} else {
				b[1+i] = byte(r)
			}
		}
		return frozen(b)
	}
	// Text first, noting where the style changes.
	text := h.text[:0]
	runs := h.runs[:0]
	defer func() { h.text, h.runs = text[:0], runs[:0] }()
	nruns := 0
	cur := Style{}
	if end > 0 {
		cur = l.cells[0].Style
	}
	start := 0
	// styled: a run of non-zero length has a style. Checked when a run
	// ends rather than per cell: this loop is the cost of every row that
	// scrolls off.
	styled := false
	cells := l.cells[:end]
	for i := range cells {
		c := &cells[i]
		if c.Wide == wideTail {
			continue
		}
		if c.Style != cur {
			if len(text) > start && cur != (Style{}) {
				styled = true
			}
			runs = appendStyle(appendUvarint(runs, len(text)-start), cur)
			nruns++
			start = len(text)
			cur = c.Style
		}
		switch r := c.R; {
		case r == 0:
			text = append(text, ' ')
		case r < utf8.RuneSelf:
			text = append(text, byte(r))
		default:
			text = utf8.AppendRune(text, r)
		}
		if l.comb != nil {
			text = append(text, l.comb[i]...)
		}
	}
	if len(text) > start && cur != (Style{}) {
		styled = true
	}
	if !styled {
		b := make([]byte, 0, 1+len(text))
		return frozen(append(append(b, flags), text...))
	}
	runs = appendStyle(appendUvarint(runs, len(text)-start), cur)
	nruns++
	b := make([]byte, 0, 1+4+len(runs)+len(text))
	b = append(b, flags|histStyled)
	b = appendUvarint(b, nruns)
	b = append(b, runs...)
	return frozen(append(b, text...))
}

// frozen turns b, which nothing else refers to or changes, into a
// histLine without copying it.
func frozen(b []byte) histLine { return histLine(unsafe.String(unsafe.SliceData(b), len(b))) }
