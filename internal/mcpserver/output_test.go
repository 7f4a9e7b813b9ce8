package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRenderHeadTailUTF8(t *testing.T) {
	dir := t.TempDir()
	o := newOutput(dir, "j1")
	text := strings.Repeat("é", 1000) // 2000 bytes
	o.Write([]byte(text))
	o.close()
	r := o.render(0, 2000, 101)
	if !r.truncated || !utf8.ValidString(r.text) {
		t.Fatalf("render: %+v", r)
	}
	head, rest, _ := strings.Cut(r.text, "\n[corral: ")
	_, tail, _ := strings.Cut(rest, "]\n")
	if int64(len(head)+len(tail))+r.omitted != 2000 || len(head) != 50 || len(tail) != 50 {
		t.Errorf("head %d tail %d omitted %d", len(head), len(tail), r.omitted)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "j1.out")); string(b) != text {
		t.Error("the output file is not the whole output")
	}
}

func TestOutputPastTheFileLimit(t *testing.T) {
	o := newOutput(t.TempDir(), "big")
	chunk := []byte(strings.Repeat("x", 1<<20))
	for i := 0; i < JobFileLimit>>20+2; i++ {
		o.Write(chunk)
	}
	o.Write([]byte("THE END\n"))
	n, _ := o.size()
	r := o.render(0, n, 1000)
	fi, _ := os.Stat(o.path)
	if fi.Size() != JobFileLimit || !strings.HasSuffix(r.text, "THE END\n") || r.outputFileOK ||
		!strings.Contains(r.text, "not kept") {
		t.Errorf("file %d bytes, reply %q...", fi.Size(), r.text[len(r.text)-200:])
	}
	// What is past the file and out of the tail is said to be gone.
	if _, ok := o.read(JobFileLimit+10, JobFileLimit+20); ok {
		t.Error("read past the file limit and before the tail succeeded")
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, size int64, age time.Duration) {
		p := filepath.Join(dir, name)
		f, _ := os.Create(p)
		f.Truncate(size) // sparse
		f.Close()
		when := time.Now().Add(-age)
		os.Chtimes(p, when, when)
	}
	mk("old.out", 10, Retention+time.Hour)
	mk("busy-old.out", 10, Retention+time.Hour)
	mk("a.out", 600<<20, 3*time.Hour)
	mk("b.out", 600<<20, 2*time.Hour)
	mk("c.out", 100, time.Hour)
	sweep(dir, func(name string) bool { return name == "busy-old.out" })
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if got := strings.Join(left, " "); got != "b.out busy-old.out c.out" {
		t.Errorf("after sweep: %s", got)
	}
}

func TestDefaultSession(t *testing.T) {
	a, b := DefaultSession("/home/x/proj"), DefaultSession("/srv/proj")
	if a == b || a != DefaultSession("/home/x/proj") || !strings.HasPrefix(a, "mcp-proj-") {
		t.Errorf("%s %s", a, b)
	}
	if s := DefaultSession("/tmp/a dir/ünï"); !strings.HasPrefix(s, "mcp-") || len(s) > 64 {
		t.Errorf("%s", s)
	}
}
