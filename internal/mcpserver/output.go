package mcpserver

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits of the output kept for jobs, in the state directory's mcp-output/.
const (
	// JobFileLimit bounds one job's output_file; output past it is
	// counted, kept in the tail buffer, but not written.
	JobFileLimit = 64 << 20
	// DirLimit bounds mcp-output/ as a whole: past it the oldest files
	// (of finished jobs) are removed.
	DirLimit = 1 << 30
	// Retention is how long an output file is kept after its last write.
	Retention = 24 * time.Hour
	// tailKeep is how much of the latest output a job keeps in memory, so
	// a reply's tail is right even past JobFileLimit.
	tailKeep = 1 << 20
	// MaxReplyBytes bounds max_output_bytes.
	MaxReplyBytes = tailKeep / 2
)

// outputDir makes (or checks) dir/mcp-output, mode 0700.
func outputDir(stateDir string) (string, error) {
	dir := filepath.Join(stateDir, "mcp-output")
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s: not a directory only its owner can use", dir)
	}
	return dir, nil
}

// sweep removes output files older than Retention, then the oldest until
// the directory holds at most DirLimit. busy names files not to touch.
func sweep(dir string, busy func(name string) bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		name string
		size int64
		mod  time.Time
	}
	var files []file
	var total int64
	for _, e := range ents {
		if !e.Type().IsRegular() || busy(e.Name()) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if time.Since(fi.ModTime()) > Retention {
			os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		files = append(files, file{e.Name(), fi.Size(), fi.ModTime()})
		total += fi.Size()
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.Before(files[j].mod) })
	for _, f := range files {
		if total <= DirLimit {
			break
		}
		os.Remove(filepath.Join(dir, f.name))
		total -= f.size
	}
}

// output is one job's merged stdout and stderr, in the order the daemon
// sent them: written to its file (up to JobFileLimit) with the latest
// tailKeep bytes also in memory. Safe for concurrent use.
type output struct {
	mu      sync.Mutex
	f       *os.File // nil if it could not be made
	path    string
	fileErr string
	n       int64  // bytes received
	tail    []byte // the last min(n, tailKeep) bytes
	changed chan struct{}
}

func newOutput(dir, job string) *output {
	o := &output{changed: make(chan struct{})}
	if dir == "" {
		o.fileErr = "no output directory"
		return o
	}
	o.path = filepath.Join(dir, job+".out")
	f, err := os.OpenFile(o.path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		o.path, o.fileErr = "", err.Error()
	} else {
		o.f = f
	}
	return o
}

// Write takes one chunk of output.
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f != nil && o.n < JobFileLimit {
		w := p
		if o.n+int64(len(w)) > JobFileLimit {
			w = w[:JobFileLimit-o.n]
		}
		if _, err := o.f.WriteAt(w, o.n); err != nil && o.fileErr == "" {
			o.fileErr = err.Error()
		}
	}
	o.n += int64(len(p))
	o.tail = append(o.tail, p...)
	if len(o.tail) > tailKeep {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-tailKeep:]...)
	}
	close(o.changed)
	o.changed = make(chan struct{})
	return len(p), nil
}

// size returns the bytes received so far and a channel closed at the next
// write.
func (o *output) size() (int64, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n, o.changed
}

// upTo returns the output's size so far, or an error when from lies
// past it.
func (o *output) upTo(from int64) (int64, error) {
	n, _ := o.size()
	if from > n {
		return 0, fmt.Errorf("offset %d is past the job's output (%d bytes so far)", from, n)
	}
	return n, nil
}

// read returns output [from, to) as far as it is kept: from the tail in
// memory, else the file. ok is false for bytes neither holds.
func (o *output) read(from, to int64) ([]byte, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if to > o.n {
		to = o.n
	}
	if from >= to {
		return nil, true
	}
	if tailFrom := o.n - int64(len(o.tail)); from >= tailFrom {
		return append([]byte(nil), o.tail[from-tailFrom:to-tailFrom]...), true
	}
	if o.path == "" || to > JobFileLimit {
		return nil, false
	}
	f := o.f
	if f == nil { // the job has ended
		var err error
		if f, err = os.Open(o.path); err != nil {
			return nil, false
		}
		defer f.Close()
	}
	b := make([]byte, to-from)
	if _, err := f.ReadAt(b, from); err != nil {
		return nil, false
	}
	return b, true
}

// close closes the file; read opens it again when it needs to.
func (o *output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f != nil {
		o.f.Close()
		o.f = nil
	}
}

// reply is the part of a job's output a reply carries.
type reply struct {
	text         string
	truncated    bool
	omitted      int64
	from, to     int64 // the range [from, to) of the output covered
	unavailable  bool  // some of the range is kept nowhere (past the file limit)
	outputFile   string
	outputFileOK bool
}

// render returns output [from, to) in at most max bytes: all of it, or its
// head and tail with one line between them saying how many bytes were left
// out and where the whole output is.
func (o *output) render(from, to int64, max int) reply {
	r := reply{from: from, to: to}
	where := o.where(&r)
	if to-from <= int64(max) {
		b, ok := o.read(from, to)
		r.text, r.unavailable = string(b), !ok
		return r
	}
	half := int64(max / 2)
	c := cut(o.read, from, to, half, half, false)
	r.text, r.truncated, r.omitted, r.unavailable = c.join(where), true, c.omitted, !c.ok
	return r
}

// where fills r's output file fields and returns what the line of a cut
// says of where the whole output is.
func (o *output) where(r *reply) string {
	o.mu.Lock()
	r.outputFile = o.path
	r.outputFileOK = o.path != "" && o.n <= JobFileLimit && o.fileErr == ""
	o.mu.Unlock()
	if !r.outputFileOK {
		return "not kept (past the output file's limit or it could not be written)"
	}
	return "in output_file " + r.outputFile
}

// cutText is a text cut by cut: its head, its tail, and what lies between.
type cutText struct {
	head, tail []byte
	from, to   int64 // the text's range
	omitted    int64
	rows       bool // cut at rows
	ok         bool // read had every byte asked for
}

// cut cuts [from, to) of the text read returns (read is o.read, or a
// slice's) to at most head bytes of its start and tail bytes of its end,
// never splitting a UTF-8 character. With rows the head ends and the tail
// starts at a row's boundary (a newline), unless a row alone is longer
// than the part: a terminal's rows come back whole. The caller knows that
// to-from is more than head+tail.
func cut(read func(from, to int64) ([]byte, bool), from, to, head, tail int64, rows bool) cutText {
	c := cutText{from: from, to: to, rows: rows, ok: true}
	if head > 0 {
		h, ok := read(from, from+head)
		c.head, c.ok = cutHead(h), ok
		if i := bytes.LastIndexByte(c.head, '\n'); rows && i >= 0 {
			c.head = c.head[:i+1]
		}
	}
	if tail > 0 {
		t, ok := read(to-tail, to)
		c.tail, c.ok = cutTail(t), c.ok && ok
		if rows {
			// The tail starts a row if the byte before it ends one.
			atRow := false
			if len(c.tail) == len(t) {
				before, _ := read(to-tail-1, to-tail)
				atRow = len(before) == 1 && before[0] == '\n'
			}
			if i := bytes.IndexByte(c.tail, '\n'); !atRow && i >= 0 && i < len(c.tail)-1 {
				c.tail = c.tail[i+1:]
			}
		}
	}
	c.omitted = (to - from) - int64(len(c.head)) - int64(len(c.tail))
	return c
}

// marker is the line that stands for what c left out (without its
// newline): how many bytes, which, and where the whole is.
func (c cutText) marker(where string) string {
	return fmt.Sprintf("[corral: %d bytes left out here (bytes %d to %d of the output), %s]",
		c.omitted, c.from+int64(len(c.head)), c.to-int64(len(c.tail)), where)
}

// join returns the head, the marker line and the tail, as one text. The
// marker line has a line of its own: a head cut at rows ends one already.
func (c cutText) join(where string) string {
	sep := "\n"
	if c.rows && (len(c.head) == 0 || c.head[len(c.head)-1] == '\n') {
		sep = ""
	}
	return fmt.Sprintf("%s%s%s\n%s", c.head, sep, c.marker(where), c.tail)
}

// cutHead drops a partial UTF-8 character at the end of b.
func cutHead(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// cutTail drops continuation bytes at the start of b.
func cutTail(b []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	return b
}
