package vt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tmuxtest"
)

// oracle is a private tmux server whose panes are fed byte streams: tmux
// is the reference the emulator's screens are compared with.
type oracle struct {
	t   *testing.T
	srv *tmuxtest.Server
	dir string
	n   int
}

// tmuxState is what the comparison reads back from a pane.
type tmuxState struct {
	text   string
	cursor string // "x,y"
	alt    bool
	title  string
	// ansi is capture-pane -e; modes are tmux's mode flags. Only the
	// oracle fills them.
	ansi  string
	modes string
	// history is the scrollback as plain text, a row a line.
	history string
}

func newOracle(t *testing.T) *oracle {
	t.Helper()
	mark := testproc.Guard(t, 2*time.Minute)
	dir := testproc.TempDir(t)
	// No status line, so the pane is the whole window; titles are kept
	// as the program sets them.
	srv := tmuxtest.New(t, dir, "set -g status off\nset -g exit-empty off\nset -g history-limit 100000\n", testproc.Env(mark))
	return &oracle{t: t, srv: srv, dir: dir}
}

func (o *oracle) tmux(args ...string) string {
	o.t.Helper()
	return o.srv.Run(args...)
}

// feed shows data in a fresh cols×rows pane (raw, no output processing,
// so the bytes arrive as a program wrote them) and returns the pane's
// state once tmux has drawn all of it.
func (o *oracle) feed(data []byte, cols, rows int) tmuxState {
	o.t.Helper()
	o.n++
	name := fmt.Sprintf("s%d", o.n)
	file := filepath.Join(o.dir, name+".bin")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		o.t.Fatal(err)
	}
	done := file + ".done"
	sh := fmt.Sprintf("stty raw -echo -opost; cat %s; touch %s; exec sleep 600", file, done)
	o.tmux("new-session", "-d", "-s", name, "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), sh)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("pane %s never finished cat", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// cat is done; tmux reads the PTY on its own schedule. Wait until
	// two reads 100 ms apart agree.
	var last tmuxState
	for i := 0; ; i++ {
		time.Sleep(100 * time.Millisecond)
		s := o.state(name, cols, rows)
		if i > 0 && s == last {
			o.tmux("kill-session", "-t", name)
			return s
		}
		last = s
		if time.Now().After(deadline) {
			o.t.Fatalf("pane %s never settled", name)
		}
	}
}

func (o *oracle) state(name string, cols, rows int) tmuxState {
	o.t.Helper()
	info := strings.TrimSpace(o.tmux("display", "-p", "-t", name,
		"#{pane_width}x#{pane_height}|#{cursor_x},#{cursor_y}|#{alternate_on}|"+tmuxModes+"|#{history_size}|#{pane_title}"))
	f := strings.SplitN(info, "|", 6)
	if len(f) != 6 || f[0] != fmt.Sprintf("%dx%d", cols, rows) {
		o.t.Fatalf("pane %s: %q, want size %dx%d", name, info, cols, rows)
	}
	st := tmuxState{
		text:   o.tmux("capture-pane", "-p", "-t", name),
		cursor: f[1],
		alt:    f[2] == "1",
		modes:  f[3],
		title:  f[5],
		ansi:   o.tmux("capture-pane", "-p", "-e", "-t", name),
	}
	// With an empty history, -S - -E -1 would print the first row.
	if f[4] != "0" {
		st.history = o.tmux("capture-pane", "-p", "-S", "-", "-E", "-1", "-t", name)
	}
	return st
}

// tmuxModes are the mode flags tmux 3.3 reports (it has none for
// bracketed paste, focus or kitty flags).
const tmuxModes = "cursor=#{cursor_flag} insert=#{insert_flag} ckm=#{keypad_cursor_flag} keypad=#{keypad_flag} " +
	"mouse=#{mouse_standard_flag}#{mouse_button_flag}#{mouse_any_flag} sgr=#{mouse_sgr_flag} utf8=#{mouse_utf8_flag} " +
	"origin=#{origin_flag} wrap=#{wrap_flag} region=#{scroll_region_upper}-#{scroll_region_lower}"

// emuState is the same reading taken from the emulator.
func emuState(data []byte, cols, rows int) (tmuxState, *Terminal) {
	v := New(cols, rows, Options{})
	v.Write(data)
	x, y, _ := v.Cursor()
	if v.WrapPending() {
		x = cols
	}
	var hist string
	for _, l := range v.Scrollback(-1, false) {
		hist += l + "\n"
	}
	return tmuxState{text: v.Text(), cursor: fmt.Sprintf("%d,%d", x, y), alt: v.Modes().AltScreen,
		title: v.Title(), history: hist}, v
}

// diffText shows the rows where two screens differ.
func diffText(want, got string) string { return tmuxtest.DiffRows(want, got, "tmux", "vt") }

// oracleCase is a byte stream and the size to show it at.
type oracleCase struct {
	name       string
	cols, rows int
	data       []byte
	// skipTitle is set where tmux and the emulator are known to
	// disagree on the title for a reason given in the case.
	skipTitle bool
}

// toACS maps DEC special graphics characters back to their ASCII letters.
func toACS(s string) string {
	return strings.Map(func(r rune) rune {
		for i, g := range decGraphics {
			if g == r && i > 0 {
				return rune(0x5f + i)
			}
		}
		return r
	}, s)
}

func syntheticCases() []oracleCase {
	var scroll bytes.Buffer
	for i := range 300 {
		fmt.Fprintf(&scroll, "line %d %s\r\n", i, strings.Repeat("abc ", i%25))
	}
	var colours bytes.Buffer
	for i := range 256 {
		fmt.Fprintf(&colours, "\x1b[38;5;%dm%3d\x1b[48;2;%d;%d;%dm#\x1b[m", i, i, i, 255-i, i/2)
		if i%16 == 15 {
			colours.WriteString("\r\n")
		}
	}
	colours.WriteString("\x1b[1;3;4;9mbold italic under strike\x1b[22;23;24;29m plain \x1b[4:3;58:2::255:0:0mcurly\x1b[m\r\n")
	return []oracleCase{
		{name: "colour", cols: 80, rows: 24, data: colours.Bytes()},
		{name: "scrolling", cols: 80, rows: 24, data: scroll.Bytes()},
		{name: "wide", cols: 20, rows: 8, data: []byte(
			"世界こんにちは漢字テスト\r\n" + // 24 cells: wraps at 20
				"abcdefghijklmnopqrs世x\r\n" + // wide char does not fit in the last column
				"e\u0301 a\u0308 n\u0303 combining\r\n" +
				"😀 emoji 🎉\r\n" +
				"ab世cd\x1b[3G全\r\n" + // a wide char overwriting half of another
				"\x1b[5;10H界\x1b[5;10Hx\r\n")},
		{name: "cursor", cols: 40, rows: 12, data: []byte(
			"\x1b[5;10Hhere\x1b[2Aup\x1b[3Bdown\x1b[10Cright\x1b[20Dleft" +
				"\x1b7\x1b[1;1Hhome\x1b8saved" +
				"\x1b[8;1Ha\tb\tc\td\x1b[3gx\x1b[1;1H\x1b[10;30H\x1b[Etab\x1b[Z<" +
				"\x1b[12;40Hcorner\x1b[100;100Hfar\x1b[9999Aclamp" +
				"\x1b[6d\x1b[20`col20\x1b[3FF\x1bD\x1bEnel\x1bMri")},
		{name: "scroll-region", cols: 30, rows: 10, data: []byte(
			"1\r\n2\r\n3\r\n4\r\n5\r\n6\r\n7\r\n8\r\n9\r\n10" +
				"\x1b[3;7r\x1b[7;1Hin region\r\nscrolls\r\nagain" +
				"\x1b[3;1H\x1bMreverse\x1bM" +
				"\x1b[5;1H\x1b[2Linserted\x1b[6;1H\x1b[1Mdeleted" +
				"\x1b[2S\x1b[1T\x1b[r\x1b[10;1H\r\nfull scroll\r\n")},
		{name: "alt-exit", cols: 40, rows: 10, data: []byte(
			"main screen text\r\nsecond line\x1b[?1049h\x1b[H\x1b[2Jalt screen\r\nmore\x1b[?1049lback")},
		{name: "alt-stay", cols: 40, rows: 10, data: []byte(
			"main\x1b]2;my title\a\x1b[?1049h\x1b[5;5Hin the alternate screen\x1b[?25l")},
		// dialog leaves 1049 twice; the second, on the main screen,
		// still restores the cursor saved on entry.
		{name: "alt-1049-twice", cols: 40, rows: 10, data: []byte(
			"\x1b[5;5H\x1b[?1049hx\x1b[?1049l\x1b[9;9Hy\x1b[?1049l")},
		{name: "alt-47", cols: 40, rows: 10, data: []byte(
			"main\r\nrows\x1b[?47hfoo\x1b[?47l bar\x1b[?1047hbaz\x1b[?1047l qux")},
		{name: "wrap", cols: 20, rows: 6, data: []byte(
			strings.Repeat("x", 20) + "\rCR after pending wrap\r\n" +
				strings.Repeat("y", 20) + "z\r\n" +
				strings.Repeat("w", 20) + "\x1b[K!\r\n" +
				"\x1b[?7l" + strings.Repeat("n", 25) + "END\x1b[?7h\r\n" +
				strings.Repeat("q", 20) + "\b\bBS")},
		{name: "erase", cols: 30, rows: 8, data: []byte(
			strings.Repeat(strings.Repeat("E", 30)+"\r\n", 7) + strings.Repeat("E", 30) +
				"\x1b[2;10H\x1b[K\x1b[3;10H\x1b[1K\x1b[4;10H\x1b[2K" +
				"\x1b[5;5H\x1b[3X\x1b[6;5H\x1b[3P\x1b[7;5H\x1b[3@\x1b[4hins\x1b[4l" +
				"\x1b[8;15H\x1b[1J\x1b[8;20H\x1b[0J\x1b[1;1H\x1b[41m\x1b[2K\x1b[m")},
		{name: "erase-all", cols: 30, rows: 8, data: []byte(
			"text\r\nmore\x1b[2J\x1b[Hafter clear\x1b[3;3Hx\x1bc\r\nreset")},
		{name: "dec-graphics", cols: 30, rows: 6, data: []byte(
			"\x1b(0lqqqqk\r\nx    x\r\nmqqqqj\x1b(B ascii\r\n\x1b)0\x0elqk\x0f back")},
		{name: "repeat", cols: 30, rows: 4, data: []byte("a\x1b[5b|\x1b[31m-\x1b[10b")},
		{name: "origin", cols: 30, rows: 10, data: []byte(
			"\x1b[3;8r\x1b[?6h\x1b[1;1Htop of region\x1b[20;1Hbottom\x1b[?6l\x1b[1;1Hscreen top")},
		{name: "title-osc0", cols: 30, rows: 4, data: []byte("\x1b]0;first\x1b\\\x1b]2;second\x07text")},
	}
}

func compareWithTmux(t *testing.T, o *oracle, c oracleCase) {
	t.Helper()
	want := o.feed(c.data, c.cols, c.rows)
	got, _ := emuState(c.data, c.cols, c.rows)
	// tmux's capture-pane prints DEC line-drawing cells as the ASCII
	// letters the program sent (lqqk), the emulator as the characters
	// they show (┌──┐), which is what a reader of the screen wants. Both
	// sides are mapped to the letters for the comparison.
	want.text, got.text = toACS(want.text), toACS(got.text)
	if want.text != got.text {
		t.Errorf("%s: screens differ\n%s", c.name, diffText(want.text, got.text))
	}
	if h1, h2 := toACS(want.history), toACS(got.history); h1 != h2 {
		t.Errorf("%s: scrollback differs\n%s", c.name, diffText(h1, h2))
	}
	if want.cursor != got.cursor {
		t.Errorf("%s: cursor: tmux %s, vt %s", c.name, want.cursor, got.cursor)
	}
	if want.alt != got.alt {
		t.Errorf("%s: alternate screen: tmux %v, vt %v", c.name, want.alt, got.alt)
	}
	if !c.skipTitle && want.title != got.title && !(got.title == "" && want.title == hostname()) {
		t.Errorf("%s: title: tmux %q, vt %q", c.name, want.title, got.title)
	}
}

func hostname() string { h, _ := os.Hostname(); return h }

// TestTmuxOracleSynthetic compares the emulator's screen, cursor,
// alternate-screen flag and title with tmux's for hand-made streams.
func TestTmuxOracleSynthetic(t *testing.T) {
	o := newOracle(t)
	for _, c := range syntheticCases() {
		compareWithTmux(t, o, c)
	}
}

// TestTmuxOracleRedraw checks Redraw and Reset on a real terminal: tmux
// shown a stream, and tmux shown only the emulator's Redraw of that
// stream, must agree cell for cell with attributes (capture-pane -e), in
// cursor, alternate screen, title and modes; after Redraw then Reset,
// every mode tmux reports is back to its default.
func TestTmuxOracleRedraw(t *testing.T) {
	o := newOracle(t)
	cases := syntheticCases()
	cases = append(cases, fixtures(t)...)
	for _, c := range cases {
		want := o.feed(c.data, c.cols, c.rows)
		v := New(c.cols, c.rows, Options{})
		v.Write(c.data)
		redraw := v.Redraw(RedrawOptions{})
		got := o.feed(redraw, c.cols, c.rows)
		// Line drawing: tmux keeps the letters and the charset, the
		// redraw sends the characters they show.
		unSO := strings.NewReplacer("\x0e", "", "\x0f", "")
		want.ansi, got.ansi = toACS(unSO.Replace(want.ansi)), toACS(unSO.Replace(got.ansi))
		if want.ansi != got.ansi {
			t.Errorf("%s: tmux shown the redraw differs\n%s", c.name, diffText(want.ansi, got.ansi))
		}
		if want.cursor != got.cursor || want.alt != got.alt || want.title != got.title || want.modes != got.modes {
			t.Errorf("%s: after redraw\n  %s %v %q %s\nwant\n  %s %v %q %s", c.name, got.cursor, got.alt, got.title,
				got.modes, want.cursor, want.alt, want.title, want.modes)
		}
		reset := o.feed(append(redraw, v.Reset()...), c.cols, c.rows)
		wantModes := fmt.Sprintf("cursor=1 insert=0 ckm=0 keypad=0 mouse=000 sgr=0 utf8=0 origin=0 wrap=1 region=0-%d",
			c.rows-1)
		if reset.modes != wantModes || reset.alt {
			t.Errorf("%s: after Reset tmux has %s alt=%v\nwant %s alt=false", c.name, reset.modes, reset.alt, wantModes)
		}
	}
}
