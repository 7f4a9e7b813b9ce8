package vt

import (
	"strings"
	"unicode/utf8"
	"unsafe"
)

// histLine is a row that scrolled off the top of the main screen, stored
// by content: its text (trailing blanks trimmed, a wide character once,
// combining marks after their base) and the styles as runs over the
// text's bytes. A row in one style, the common case, has no runs.
type histLine struct {
	text    string
	runs    []styleRun
	style   Style // the style of the whole text when runs is nil
	wrapped bool
}

// styleRun gives the style of the next n bytes of a histLine's text.
type styleRun struct {
	n     uint32
	style Style
}

// lineOverhead is what a stored row costs beyond its text and runs: its
// slot in the ring (kept at most twice the live rows by compaction) and
// the allocator's rounding of its text.
var lineOverhead = 2*int(unsafe.Sizeof(histLine{})) + 16

// history is the scrollback: stored rows, oldest first, with their cost
// in bytes kept at or under budget by evicting whole rows from the front.
type history struct {
	lines  []histLine
	head   int // lines[:head] are evicted slots awaiting compaction
	bytes  int
	budget int
}

func (h *history) cost(l *histLine) int {
	return len(l.text) + len(l.runs)*int(unsafe.Sizeof(styleRun{})) + lineOverhead
}

// push stores a copy of l.
func (h *history) push(l *line) {
	if h.budget <= 0 {
		return
	}
	hl := encodeLine(l)
	c := h.cost(&hl)
	if c > h.budget {
		return
	}
	h.lines = append(h.lines, hl)
	h.bytes += c
	for h.bytes > h.budget {
		h.bytes -= h.cost(&h.lines[h.head])
		h.lines[h.head] = histLine{}
		h.head++
	}
	if h.head > 64 && h.head > len(h.lines)/2 {
		n := copy(h.lines, h.lines[h.head:])
		clear(h.lines[n:])
		h.lines = h.lines[:n]
		h.head = 0
	}
}

func (h *history) clear() {
	h.lines, h.head, h.bytes = nil, 0, 0
}

func (h *history) len() int { return len(h.lines) - h.head }

// at returns stored row i, 0 being the oldest.
func (h *history) at(i int) *histLine { return &h.lines[h.head+i] }

// encodeLine turns a grid row into its stored form.
func encodeLine(l *line) histLine {
	end := len(l.cells)
	for end > 0 {
		c := l.cells[end-1]
		if (c.R != 0 && c.R != ' ') || c.Style != (Style{}) {
			break
		}
		if l.comb != nil && l.comb[end-1] != "" {
			break
		}
		end--
	}
	hl := histLine{wrapped: l.wrapped}
	if end == 0 {
		return hl
	}
	var sb strings.Builder
	sb.Grow(end)
	var runs []styleRun
	cur := l.cells[0].Style
	start := 0
	for i, c := range l.cells[:end] {
		if c.Wide == wideTail {
			continue
		}
		if c.Style != cur {
			runs = append(runs, styleRun{n: uint32(sb.Len() - start), style: cur})
			start = sb.Len()
			cur = c.Style
		}
		r := c.R
		if r == 0 {
			r = ' '
		}
		if r < utf8.RuneSelf {
			sb.WriteByte(byte(r))
		} else {
			sb.WriteRune(r)
		}
		if l.comb != nil {
			sb.WriteString(l.comb[i])
		}
	}
	hl.text = sb.String()
	if runs == nil {
		hl.style = cur
		return hl
	}
	runs = append(runs, styleRun{n: uint32(sb.Len() - start), style: cur})
	hl.runs = runs[:len(runs):len(runs)]
	return hl
}
