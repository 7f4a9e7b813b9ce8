package vt

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/corral-dev/corral/internal/testproc"
)

// A recording is a real program run in a PTY and driven by keys; its
// output bytes are the fixture testdata/NAME-COLSxROWS.bin. The fixtures
// are committed, so the oracle test needs only tmux; VT_RECORD=1 makes
// them again from the programs on this machine (VT_RECORD=vim,less: only
// those):
//
//	VT_RECORD=1 go test -run TestRecordFixtures ./internal/vt
type recording struct {
	name       string
	cols, rows int
	argv       []string
	// keys are written one step at a time, each once the output has
	// been quiet for a moment.
	keys []string
}

func recordings(dir string) []recording {
	return []recording{
		{name: "vim", cols: 80, rows: 24,
			argv: []string{"vim", "-u", "NONE", "-i", "NONE", "-N", filepath.Join(dir, "file.txt")},
			keys: []string{"Go", "typed line with 世界 wide text", "\x1b", ":split\r", "gg", "dd", "10j",
				":set number\r", "\x17j", "/line 30\r", ":q!\r", ":q!\r"}},
		{name: "less", cols: 80, rows: 24,
			argv: []string{"less", "-R", filepath.Join(dir, "colour.txt")},
			keys: []string{" ", " ", "/line 150\r", "n", "b", "q"}},
		{name: "top", cols: 100, rows: 30,
			argv: []string{"top", "-d", "0.5"},
			keys: []string{"", "", "q"}},
		{name: "python3", cols: 80, rows: 24,
			argv: []string{"python3", "-q", "-i"},
			keys: []string{"print('wrap ' * 30)\r", "for i in range(40): print(i, '世' * (i % 5))\r", "\r",
				"import sys; sys.stdout.write('\\x1b[1;31mred\\x1b[0m\\n')\r", "exit()\r"}},
		{name: "dialog", cols: 80, rows: 24,
			argv: []string{"dialog", "--title", "Pick one", "--menu", "Choose a colour:", "15", "50", "4",
				"red", "a warm colour", "green", "grass", "blue", "the sea", "black", "night"},
			keys: []string{"\x1b[B", "\x1b[B", "\t", "\t", "\r"}},
		// vttest's first menu entries: cursor movement, screen
		// features; each screen waits for Return.
		{name: "vttest-cursor", cols: 80, rows: 24, argv: []string{"vttest"},
			keys: []string{"1\r", "\r", "\r", "\r", "\r", "\r", "\r", "0\r"}},
		{name: "vttest-screen", cols: 80, rows: 24, argv: []string{"vttest"},
			keys: append(append([]string{"2\r"}, strings.Split(strings.Repeat("\r", 15), "")...), "0\r")},
		// Menu 8: insert and delete characters and lines (VT102).
		{name: "vttest-insdel", cols: 80, rows: 24, argv: []string{"vttest"},
			keys: append(append([]string{"8\r"}, strings.Split(strings.Repeat("\r", 14), "")...), "0\r")},
		{name: "bash-colour", cols: 60, rows: 20,
			argv: []string{"bash", "--norc", "--noprofile", "-i"},
			keys: []string{"ls --color=always -la /usr/bin | head -30\r", "printf '\\e[38;5;208morange\\e[0m \\e[48;2;0;0;255mblue\\e[0m\\n'\r",
				"printf '%s\\n' 日本語テキスト 'é́ combining'\r", "exit\r"}},
	}
}

func writeInputs(t *testing.T, dir string) {
	var f, c strings.Builder
	for i := range 60 {
		fmt.Fprintf(&f, "line %d of a file for vim %s\n", i, strings.Repeat("=", i%40))
	}
	for i := range 300 {
		fmt.Fprintf(&c, "\x1b[3%dmline %d\x1b[0m in colour, \x1b[1mbold\x1b[0m and 漢字 %s\n", i%8, i, strings.Repeat("-", i%50))
	}
	if os.WriteFile(filepath.Join(dir, "file.txt"), []byte(f.String()), 0o600) != nil ||
		os.WriteFile(filepath.Join(dir, "colour.txt"), []byte(c.String()), 0o600) != nil {
		t.Fatal("cannot write the inputs")
	}
}

// record runs r in a PTY and returns everything it wrote. A Terminal is
// fed the output and its replies go back to the program, as a holder
// would do, so that programs that query the terminal get answers.
func record(t *testing.T, r recording, env []string) []byte {
	t.Helper()
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Env = append(env, "TERM=xterm-256color", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PS1=$ ", "HOME="+os.TempDir(),
		"LESS=", "LESSHISTFILE=-", "PYTHONSTARTUP=", "COLUMNS=", "LINES=")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(r.cols), Rows: uint16(r.rows)})
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	var mu sync.Mutex
	var out bytes.Buffer
	last := time.Now()
	term := New(r.cols, r.rows, Options{Reply: func(b []byte) { ptmx.Write(b) }})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			term.Write(buf[:n])
			last = time.Now()
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	quiet := func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			q := time.Since(last) > 400*time.Millisecond
			mu.Unlock()
			if q {
				return
			}
		}
	}
	for _, k := range r.keys {
		quiet()
		ptmx.Write([]byte(k))
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-waited
		t.Errorf("%s did not exit after its keys; killed", r.name)
	}
	ptmx.Close()
	<-readDone
	mu.Lock()
	defer mu.Unlock()
	return bytes.Clone(out.Bytes())
}

// TestRecordFixtures makes the fixtures from real programs (VT_RECORD=1).
func TestRecordFixtures(t *testing.T) {
	if os.Getenv("VT_RECORD") == "" {
		t.Skip("set VT_RECORD=1 to record the fixtures again from the programs on this machine")
	}
	mark := testproc.Guard(t, 3*time.Minute)
	dir := testproc.TempDir(t)
	writeInputs(t, dir)
	only := os.Getenv("VT_RECORD")
	for _, r := range recordings(dir) {
		if only != "1" && !strings.Contains(","+only+",", ","+r.name+",") {
			continue
		}
		if _, err := exec.LookPath(r.argv[0]); err != nil {
			t.Logf("%s: not installed, fixture kept as it is", r.name)
			continue
		}
		data := record(t, r, testproc.Env(mark))
		file := filepath.Join("testdata", fmt.Sprintf("%s-%dx%d.bin", r.name, r.cols, r.rows))
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes", file, len(data))
	}
}

// fixtures lists the recorded streams with their sizes.
func fixtures(t *testing.T) []oracleCase {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.bin"))
	sort.Strings(files)
	var cs []oracleCase
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".bin")
		i := strings.LastIndexByte(base, '-')
		var c oracleCase
		if _, err := fmt.Sscanf(base[i+1:], "%dx%d", &c.cols, &c.rows); err != nil {
			t.Fatalf("%s: name does not end in -COLSxROWS", f)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c.name, c.data = base, data
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		t.Fatal("no fixtures in testdata")
	}
	return cs
}

// TestTmuxOracleRecorded compares the emulator with tmux on the recorded
// output of real programs: the final screen, cursor, alternate-screen flag
// and title, and the screen at every 1/8 of the stream, so that the
// states a program passed through are compared too, not only its exit.
func TestTmuxOracleRecorded(t *testing.T) {
	o := newOracle(t)
	for _, c := range fixtures(t) {
		for k := 1; k <= 8; k++ {
			cut := len(c.data) * k / 8
			part := c
			part.name = fmt.Sprintf("%s[:%d]", c.name, cut)
			part.data = c.data[:cut]
			compareWithTmux(t, o, part)
		}
	}
}
