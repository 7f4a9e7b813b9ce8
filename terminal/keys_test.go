package terminal

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"Enter"}, "\r"},
		{[]string{"C-c"}, "\x03"},
		{[]string{"C-C"}, "\x03"},
		{[]string{"C-["}, "\x1b"},
		{[]string{"C-\\"}, "\x1c"},
		{[]string{"C-Space"}, "\x00"},
		{[]string{"Escape", ":", "w", "q", "Enter"}, "\x1b:wq\r"},
		{[]string{"M-x"}, "\x1bx"},
		{[]string{"M-Enter"}, "\x1b\r"},
		{[]string{"Up", "Down", "Right", "Left"}, "\x1b[A\x1b[B\x1b[C\x1b[D"},
		{[]string{"C-Up"}, "\x1b[1;5A"},
		{[]string{"S-Left"}, "\x1b[1;2D"},
		{[]string{"F1", "F5", "F12"}, "\x1bOP\x1b[15~\x1b[24~"},
		{[]string{"PageUp", "NPage", "DC"}, "\x1b[5~\x1b[6~\x1b[3~"},
		{[]string{"C-PageUp"}, "\x1b[5;5~"},
		{[]string{"BTab", "S-Tab"}, "\x1b[Z\x1b[Z"},
		{[]string{"é"}, "é"},
	} {
		got, err := Keys(c.names...)
		if err != nil || string(got) != c.want {
			t.Errorf("Keys(%q) = %q, %v; want %q", c.names, got, err, c.want)
		}
	}
	if b, err := KeysFor(true, "Up", "Left", "Home", "C-Up", "PageUp", "Enter"); err != nil || string(b) != "\x1bOA\x1bOD\x1bOH\x1b[1;5A\x1b[5~\r" {
		t.Errorf("application cursor keys: %q, %v", b, err)
	}
	for _, bad := range []string{"Enterr", "hello", "C-", "X-a", "C-é", "S-a", ""} {
		if b, err := Keys("Enter", bad); err == nil {
			t.Errorf("Keys(%q) = %q, want an error", bad, b)
		} else if !strings.Contains(err.Error(), "key") || (bad != "" && !strings.Contains(err.Error(), bad)) {
			t.Errorf("Keys(%q): %v does not name the key", bad, err)
		}
	}
}
