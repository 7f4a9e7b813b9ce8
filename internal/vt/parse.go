package vt

import "unicode/utf8"

// Parser bounds: a sequence past them is still consumed to its end, but
// what does not fit is dropped. Nothing grows with the input.
const (
	maxParams   = 32
	maxParamVal = 65535
	maxOSC      = 4096
)

type pstate uint8

const (
	sGround pstate = iota
	sEsc
	sEscInter
	sCSI
	sCSIIgnore
	sOSC
	sOSCEsc
	sString    // DCS, SOS, PM, APC: consumed and ignored
	sStringEsc // ESC seen inside one of them
)

// parser is the state of the escape-sequence decoder between Writes.
type parser struct {
	state pstate

	// utf8 is a partial UTF-8 sequence, need its full length.
	utf8 [4]byte
	nutf int
	need int

	prefix byte // CSI private marker: one of < = > ?
	inter  [2]byte
	ninter int
	params [maxParams]int32
	// sub marks params that follow a colon (SGR 38:2::r:g:b, 4:3).
	sub     uint32
	nparams int
	cur     int32
	hasCur  bool
	over    bool // too many intermediates: ignore the sequence

	osc []byte
}

// Write feeds the program's output to the terminal. It never fails; the
// error is always nil. Sequences and UTF-8 may be split across calls.
func (t *Terminal) Write(b []byte) (int, error) {
	n := len(b)
	p := &t.p
	for i := 0; i < len(b); {
		c := b[i]
		if p.state == sGround {
			if p.nutf > 0 {
				if i = t.continueUTF8(b, i); i < 0 {
					return n, nil
				}
				continue
			}
			if t.slow {
				// The reference path (tests): a byte at a time.
				switch {
				case c >= 0x20 && c < 0x7f:
					t.print(rune(c))
					i++
					continue
				case c >= 0x80:
					i = t.startUTF8(b, i)
					continue
				}
			} else if c >= 0x20 && c < 0x7f {
				j := i + 1
				for j < len(b) && b[j] >= 0x20 && b[j] < 0x7f {
					j++
				}
				t.printASCII(b[i:j])
				i = j
				continue
			}
			if c >= 0x80 {
				if c >= 0xc2 && c <= 0xf4 && i+4 <= len(b) {
					r, size := utf8.DecodeRune(b[i:])
					if r != utf8.RuneError || size > 1 {
						t.printRune(r)
						i += size
						continue
					}
				}
				i = t.startUTF8(b, i)
				continue
			}
		}
		t.step(c)
		i++
	}
	return n, nil
}

// startUTF8 begins a multi-byte sequence at b[i] that may end in a later
// Write, and returns the next index to look at.
func (t *Terminal) startUTF8(b []byte, i int) int {
	p := &t.p
	c := b[i]
	switch {
	case c >= 0xc2 && c <= 0xdf:
		p.need = 2
	case c >= 0xe0 && c <= 0xef:
		p.need = 3
	case c >= 0xf0 && c <= 0xf4:
		p.need = 4
	default:
		t.printRune(utf8.RuneError)
		return i + 1
	}
	p.utf8[0] = c
	p.nutf = 1
	i++
	if r := t.continueUTF8(b, i); r >= 0 {
		return r
	}
	return len(b)
}

// continueUTF8 adds bytes from b[i:] to the partial sequence. It returns
// the next index, or -1 when b ran out first.
func (t *Terminal) continueUTF8(b []byte, i int) int {
	p := &t.p
	for p.nutf < p.need {
		if i >= len(b) {
			return -1
		}
		c := b[i]
		if c < 0x80 || c > 0xbf {
			// Broken sequence: one replacement, then c on its own.
			p.nutf = 0
			t.printRune(utf8.RuneError)
			return i
		}
		p.utf8[p.nutf] = c
		p.nutf++
		i++
	}
	r, _ := utf8.DecodeRune(p.utf8[:p.nutf])
	p.nutf = 0
	t.printRune(r)
	return i
}

func (t *Terminal) printRune(r rune) {
	if !validRune(r) {
		if r >= 0x80 && r < 0xa0 {
			return // C1 controls encoded in UTF-8: ignored
		}
		r = utf8.RuneError
	}
	t.print(r)
}

// step advances the parser by one byte outside the ground-state fast path.
func (t *Terminal) step(c byte) {
	p := &t.p
	// Anywhere: CAN and SUB abort a sequence, ESC starts a new one.
	switch c {
	case 0x18, 0x1a:
		if p.state == sOSC || p.state == sOSCEsc || p.state == sString || p.state == sStringEsc {
			p.osc = p.osc[:0]
		}
		p.state = sGround
		return
	case 0x1b:
		switch p.state {
		case sOSC:
			p.state = sOSCEsc
			return
		case sString:
			p.state = sStringEsc
			return
		}
		p.state = sEsc
		p.ninter, p.over = 0, false
		return
	}
	switch p.state {
	case sGround:
		if c < 0x20 {
			t.control(c)
		}
		// 0x7f and stray bytes are ignored.
	case sEsc:
		switch {
		case c < 0x20:
			t.control(c)
		case c >= 0x20 && c <= 0x2f:
			t.collectInter(c)
			p.state = sEscInter
		case c == '[':
			p.state = sCSI
			p.prefix, p.ninter, p.nparams, p.sub, p.cur, p.hasCur, p.over = 0, 0, 0, 0, 0, false, false
		case c == ']':
			p.state = sOSC
			p.osc = p.osc[:0]
		case c == 'P' || c == 'X' || c == '^' || c == '_':
			p.state = sString
		case c == 0x7f:
		default:
			p.state = sGround
			t.escDispatch(c)
		}
	case sEscInter:
		switch {
		case c < 0x20:
			t.control(c)
		case c <= 0x2f:
			t.collectInter(c)
		case c == 0x7f:
		default:
			p.state = sGround
			if !p.over {
				t.escDispatch(c)
			}
		}
	case sCSI:
		switch {
		case c < 0x20:
			t.control(c)
		case c >= '0' && c <= '9':
			if p.ninter > 0 {
				p.state = sCSIIgnore
				return
			}
			p.cur = min(p.cur*10+int32(c-'0'), maxParamVal)
			p.hasCur = true
		case c == ';' || c == ':':
			if p.ninter > 0 {
				p.state = sCSIIgnore
				return
			}
			t.pushParam()
			if c == ':' && p.nparams < maxParams {
				p.sub |= 1 << p.nparams
			}
		case c >= '<' && c <= '?':
			if p.nparams > 0 || p.hasCur || p.prefix != 0 || p.ninter > 0 {
				p.state = sCSIIgnore
				return
			}
			p.prefix = c
		case c >= 0x20 && c <= 0x2f:
			t.collectInter(c)
		case c >= 0x40 && c <= 0x7e:
			p.state = sGround
			if p.hasCur || p.nparams > 0 {
				t.pushParam()
			}
			if !p.over {
				t.csiDispatch(c)
			}
		}
	case sCSIIgnore:
		switch {
		case c < 0x20:
			t.control(c)
		case c >= 0x40 && c <= 0x7e:
			p.state = sGround
		}
	case sOSC:
		switch {
		case c == 0x07:
			p.state = sGround
			t.oscDispatch()
		case c < 0x20:
		default:
			if len(p.osc) < maxOSC {
				p.osc = append(p.osc, c)
			}
		}
	case sOSCEsc:
		// ESC \ ends the string; ESC anything else ends it too and
		// starts a new sequence with that byte.
		p.state = sGround
		t.oscDispatch()
		if c != '\\' {
			p.state = sEsc
			p.ninter, p.over = 0, false
			t.step(c)
		}
	case sString:
	case sStringEsc:
		p.state = sString
		if c == '\\' {
			p.state = sGround
		}
	}
}

func (t *Terminal) collectInter(c byte) {
	p := &t.p
	if p.ninter < len(p.inter) {
		p.inter[p.ninter] = c
		p.ninter++
	} else {
		p.over = true
	}
}

func (t *Terminal) pushParam() {
	p := &t.p
	if p.nparams < maxParams {
		p.params[p.nparams] = p.cur
		p.nparams++
	}
	p.cur, p.hasCur = 0, false
}

// param returns parameter i, or def if it is absent or 0.
func (t *Terminal) param(i int, def int) int {
	if i >= t.p.nparams || t.p.params[i] == 0 {
		return def
	}
	return int(t.p.params[i])
}

// control executes a C0 control character.
func (t *Terminal) control(c byte) {
	switch c {
	case 0x07: // BEL
	case 0x08: // BS
		if t.wrapNext {
			t.wrapNext = false
		} else if t.x > 0 {
			t.x--
		}
	case 0x09: // HT
		t.tabForward(1)
	case 0x0a, 0x0b, 0x0c: // LF, VT, FF
		t.wrapNext = false
		t.index()
		if t.modes.NewLine {
			t.x = 0
		}
	case 0x0d: // CR
		t.x, t.wrapNext = 0, false
	case 0x0e: // SO
		t.gl = 1
	case 0x0f: // SI
		t.gl = 0
	}
}

func (t *Terminal) tabForward(n int) {
	if t.wrapNext {
		return
	}
	for ; n > 0 && t.x < t.cols-1; n-- {
		t.x++
		for t.x < t.cols-1 && !t.tabs[t.x] {
			t.x++
		}
	}
}

func (t *Terminal) tabBackward(n int) {
	t.wrapNext = false
	for ; n > 0 && t.x > 0; n-- {
		t.x--
		for t.x > 0 && !t.tabs[t.x] {
			t.x--
		}
	}
}

// escDispatch executes ESC [inter] final.
func (t *Terminal) escDispatch(c byte) {
	p := &t.p
	if p.ninter > 0 {
		switch p.inter[0] {
		case '(', ')':
			g := 0
			if p.inter[0] == ')' {
				g = 1
			}
			if c == '0' {
				t.charsets[g] = charsetDEC
			} else {
				t.charsets[g] = charsetASCII
			}
		case '#':
			if c == '8' { // DECALN
				for _, l := range t.cur.lines {
					for i := range l.cells {
						l.cells[i] = Cell{R: 'E'}
					}
					l.comb = nil
					l.used = len(l.cells)
				}
				t.top, t.bot = 0, t.rows-1
				t.moveTo(0, 0)
			}
		}
		return
	}
	switch c {
	case '7':
		t.saveCursor()
	case '8':
		t.restoreCursor()
	case 'D':
		t.wrapNext = false
		t.index()
	case 'E':
		t.x, t.wrapNext = 0, false
		t.index()
	case 'H':
		t.tabs[t.x] = true
	case 'M':
		t.wrapNext = false
		t.reverseIndex()
	case 'c':
		t.fullReset()
	case '=':
		t.modes.Keypad = true
	case '>':
		t.modes.Keypad = false
	}
}

// fullReset is RIS: the power-on state; the scrollback is kept, and gets
// the main screen's rows as on ED 2.
func (t *Terminal) fullReset() {
	t.pushScreen()
	for _, l := range t.main.lines {
		l.clear(Style{})
	}
	t.resetState()
}
