package terminal

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Keys turns key names in tmux's notation (as tmux send-keys takes them)
// into the bytes a terminal sends for them: Enter, Tab, BTab, Space,
// Escape, BSpace, Up, Down, Left, Right, Home, End, PageUp (PPage),
// PageDown (NPage), Insert (IC), Delete (DC), F1 to F12, a single
// character, and any of these with modifiers C- (control), M- (meta:
// ESC first) and S- (shift, for the special keys): C-c, M-x, C-Up, S-F5.
// Cursor and function keys are sent in the terminal's normal mode (CSI
// and SS3 sequences as xterm sends them). A name that is none of these
// is an error naming it: send text as text, not as keys.
func Keys(names ...string) ([]byte, error) { return KeysFor(false, names...) }

// KeysFor is Keys for a program that asked for application cursor keys
// (DECCKM, Screen.AppCursor) if appCursor is set: Up, Down, Right, Left,
// Home and End without modifiers are then sent as SS3 sequences
// (ESC O A), as xterm sends them in that mode.
func KeysFor(appCursor bool, names ...string) ([]byte, error) {
	var out []byte
	for _, n := range names {
		b, err := key(n, appCursor)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// plainKeys are the named keys that are one byte sequence whatever the
// modifiers (those are refused for them, but C- and M- of Space, Tab...
// are handled in key).
var plainKeys = map[string]string{
	"Enter": "\r", "Tab": "\t", "BTab": "\x1b[Z", "Space": " ", "Escape": "\x1b", "BSpace": "\x7f",
}

// csiKeys are cursor and editing keys: final byte of CSI (or SS3 for
// F1-F4), or a number for CSI n ~.
var csiKeys = map[string]string{
	"Up": "A", "Down": "B", "Right": "C", "Left": "D", "Home": "H", "End": "F",
	"F1": "P", "F2": "Q", "F3": "R", "F4": "S",
}

var tildeKeys = map[string]int{
	"Insert": 2, "IC": 2, "Delete": 3, "DC": 3, "PageUp": 5, "PPage": 5, "PgUp": 5, "PageDown": 6, "NPage": 6, "PgDn": 6,
	"F5": 15, "F6": 17, "F7": 18, "F8": 19, "F9": 20, "F10": 21, "F11": 23, "F12": 24,
}

func key(name string, appCursor bool) ([]byte, error) {
	rest := name
	var ctrl, meta, shift bool
	for len(rest) > 2 && rest[1] == '-' {
		switch rest[0] {
		case 'C', 'c':
			ctrl = true
		case 'M', 'm':
			meta = true
		case 'S', 's':
			shift = true
		default:
			return nil, unknownKey(name)
		}
		rest = rest[2:]
	}
	if rest == "" {
		return nil, unknownKey(name)
	}
	mod := 1
	if shift {
		mod++
	}
	if meta {
		mod += 2
	}
	if ctrl {
		mod += 4
	}
	if f, ok := csiKeys[rest]; ok {
		switch {
		case mod > 1:
			return []byte("\x1b[1;" + fmt.Sprint(mod) + f), nil
		case strings.HasPrefix(rest, "F"), appCursor:
			return []byte("\x1bO" + f), nil
		default:
			return []byte("\x1b[" + f), nil
		}
	}
	if n, ok := tildeKeys[rest]; ok {
		if mod > 1 {
			return []byte(fmt.Sprintf("\x1b[%d;%d~", n, mod)), nil
		}
		return []byte(fmt.Sprintf("\x1b[%d~", n)), nil
	}
	var b []byte
	if s, ok := plainKeys[rest]; ok {
		b = []byte(s)
		if rest == "Space" && ctrl {
			b, ctrl = []byte{0}, false
		}
		if rest == "Tab" && shift {
			b, shift = []byte("\x1b[Z"), false
		}
	} else if r, size := utf8.DecodeRuneInString(rest); size == len(rest) && r != utf8.RuneError {
		b = []byte(rest)
		if ctrl {
			c, ok := control(r)
			if !ok {
				return nil, fmt.Errorf("key %q: there is no control character for %q (C- takes a letter or one of @[\\]^_? and Space)", name, r)
			}
			b, ctrl = []byte{c}, false
		}
	} else {
		return nil, unknownKey(name)
	}
	if ctrl || shift {
		return nil, fmt.Errorf("key %q: %s cannot be sent with that modifier", name, rest)
	}
	if meta {
		b = append([]byte{0x1b}, b...)
	}
	return b, nil
}

// control is the control character C-r: the letter's (either case) or
// one of @[\]^_? (0 to 0x1f, 0x7f).
func control(r rune) (byte, bool) {
	switch {
	case r >= 'a' && r <= 'z':
		return byte(r-'a') + 1, true
	case r >= '@' && r <= '_': // @, A-Z, [, \, ], ^, _
		return byte(r - '@'), true
	case r == '?':
		return 0x7f, true
	case r == ' ':
		return 0, true
	}
	return 0, false
}

func unknownKey(name string) error {
	var names []string
	for k := range plainKeys {
		names = append(names, k)
	}
	for k := range csiKeys {
		names = append(names, k)
	}
	for k := range tildeKeys {
		names = append(names, k)
	}
	sort.Strings(names)
	return fmt.Errorf("unknown key name %q: give a key in tmux's notation (%s, a single character, with C-, M- or S- before it) or send it as text, without --keys",
		name, strings.Join(names, ", "))
}
