package vt

import (
	"unicode"

	"golang.org/x/text/width"
)

// Color is a foreground, background or underline colour: the default, one
// of the 256 indexed colours, or a 24-bit RGB value. The zero Color is the
// terminal's default.
type Color uint32

const (
	colorIndexed = 1 << 24
	colorRGB     = 2 << 24
	// colorANSI is one of the 16 colours set by SGR 30–37, 90–97 (and
	// the background ones): the same palette entry as Indexed, but kept
	// apart because terminals may draw them differently (bold as bright).
	colorANSI = 3 << 24
	colorKind = 0xff << 24
)

// Indexed returns palette colour n as set by SGR 38;5;n.
func Indexed(n uint8) Color { return Color(colorIndexed | uint32(n)) }

// ANSI returns colour n (0–15) as set by SGR 30–37 and 90–97.
func ANSI(n uint8) Color { return Color(colorANSI | uint32(n&15)) }

// RGB returns a 24-bit colour.
func RGB(r, g, b uint8) Color { return Color(colorRGB | uint32(r)<<16 | uint32(g)<<8 | uint32(b)) }

// IsDefault reports whether c is the terminal's default colour.
func (c Color) IsDefault() bool { return c == 0 }

// Index returns the palette index of an indexed colour.
func (c Color) Index() (uint8, bool) {
	return uint8(c), c&colorKind == colorIndexed || c&colorKind == colorANSI
}

// RGB returns the components of a 24-bit colour.
func (c Color) RGB() (r, g, b uint8, ok bool) {
	return uint8(c >> 16), uint8(c >> 8), uint8(c), c&colorKind == colorRGB
}

// Attr is a set of SGR attributes.
type Attr uint16

// The SGR attributes the emulator keeps.
const (
	Bold Attr = 1 << iota
	Dim
	Italic
	Blink
	Inverse
	Hidden
	Strike
	Overline
)

// Underline is an underline style (SGR 4 and 4:n).
type Underline uint8

// Underline styles, numbered as in SGR 4:n.
const (
	UnderlineNone Underline = iota
	UnderlineSingle
	UnderlineDouble
	UnderlineCurly
	UnderlineDotted
	UnderlineDashed
)

// Style is what SGR sets: the attributes and colours a cell is drawn with.
// The zero Style is the default.
type Style struct {
	Fg, Bg, UlColor Color
	Attr            Attr
	Underline       Underline
}

// Cell is one position of the grid. R is 0 for a position never written
// or erased (drawn as a space). A wide character occupies two cells: the
// first has Wide set to 1, the second to 2 and R 0.
type Cell struct {
	R     rune
	Wide  uint8
	Style Style
}

const (
	wideLead = 1
	wideTail = 2
)

// runeWidth returns how many cells r takes: 0 for combining marks and
// other zero-width characters, 2 for East Asian wide and fullwidth ones.
func runeWidth(r rune) int {
	if r < 0x300 {
		return 1
	}
	if r == 0x200d || (r >= 0x1160 && r <= 0x11ff) || (r >= 0x200b && r <= 0x200f) ||
		unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf) {
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// decGraphics maps 0x5f–0x7e to the DEC special graphics set (line drawing).
var decGraphics = [32]rune{
	' ', '◆', '▒', '␉', '␌', '␍', '␊', '°', '±', '␤', '␋', '┘', '┐', '┌', '└', '┼',
	'⎺', '⎻', '─', '⎼', '⎽', '├', '┤', '┴', '┬', '│', '≤', '≥', 'π', '≠', '£', '·',
}
