//go:build linux

package terminal

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestVttestMatchesTmux runs vttest (the Debian package) in a terminal
// session and in a tmux pane at 80×24, walks the same menus with the
// same keys, and compares the screens after every key. Each screen of
// vttest is drawn by the program for a VT100 to show, so the holder's
// screen model is checked against tmux on the sequences vttest was made
// to exercise, through the whole holder (PTY, reader, feeder, screen).
// The recorded streams of menus 1 and 2 are fixtures of internal/vt's
// oracle test as well (testdata/vttest-*.bin).
func TestVttestMatchesTmux(t *testing.T) {
	need(t, "vttest")
	menus := []struct {
		name string
		keys []string
		skip string
	}{
		// Each screen waits for Return; the last Return goes back to
		// the main menu.
		{name: "cursor movements", keys: append([]string{"1\r"}, repeat("\r", 7)...)},
		{name: "screen features", keys: append([]string{"2\r"}, repeat("\r", 15)...)},
		{name: "character sets", skip: "vttest asks the terminal what it is and shows VT220 terminals " +
			"(the holder answers DA as one) a menu of character sets where it shows a VT100 (tmux) the " +
			"test at once: the two follow different screens"},
		{name: "insert and delete", keys: append([]string{"8\r"}, repeat("\r", 14)...)},
	}
	for _, m := range menus {
		t.Run(strings.ReplaceAll(m.name, " ", "-"), func(t *testing.T) {
			if m.skip != "" {
				t.Skip(m.skip)
			}
			mark := testproc.Guard(t, 3*time.Minute)
			argv := []string{"vttest"}
			tm := openTest(t, mark, Config{Path: argv[0], Args: argv})
			p := newPane(t, mark, 80, 24, progEnv(mark), argv...)
			compareAs(t, tm, p, m.keys, toACS)
		})
	}
}

// decGraphics are the characters DEC special graphics 0x60–0x7e show.
const decGraphics = "◆▒␉␌␍␊°±␤␋┘┐┌└┼⎺⎻─⎼⎽├┤┴┬│≤≥π≠£·"

// toACS turns the DEC special graphics that the holder keeps as the
// characters they show (┌─┐) back into the ASCII letters that tmux keeps
// with a charset flag (lqk).
func toACS(s string) string {
	return strings.Map(func(r rune) rune {
		if i := strings.IndexRune(decGraphics, r); i >= 0 {
			return rune(0x60 + utf8.RuneCountInString(decGraphics[:i]))
		}
		return r
	}, s)
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
