package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unicode/utf8"

	"github.com/corral-dev/corral"
)

// isEPIPE reports whether err is a write to a pipe whose reader went
// away: a plain tool stays silent about it.
func isEPIPE(err error) bool { return errors.Is(err, syscall.EPIPE) }

// openResult opens the target of --result before anything runs, so that a
// bad path fails first. "" means none; "-" means stdout (nil is returned
// and writeResult writes there). A target that is not a regular file
// (/dev/stdout on a pipe, a FIFO) or is the very file stdout or stderr
// writes to (/dev/stdout when stdout is a file) is opened for appending
// and never truncated, so the command's own output is kept: the JSON line
// goes after it. Any other file is truncated, as by os.Create.
func openResult(path string, stdout io.Writer) (*os.File, error) {
	if path == "" || path == "-" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o666)
	if err != nil {
		return nil, &exitError{code: exitInternal, msg: fmt.Sprintf("--result: %v", err)}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &exitError{code: exitInternal, msg: fmt.Sprintf("--result: %v", err)}
	}
	if fi.Mode().IsRegular() && !sameFile(fi, stdout) && !sameFile(fi, os.Stderr) {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, &exitError{code: exitInternal, msg: fmt.Sprintf("--result: %v", err)}
		}
	}
	return f, nil
}

// sameFile reports whether w is an open file with fi's device and inode.
func sameFile(fi os.FileInfo, w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	wi, err := f.Stat()
	if err != nil {
		return false
	}
	return os.SameFile(fi, wi)
}

// writeResult writes res as one JSON line to f, or to stdout if f is nil
// and --result was "-". It runs after the command's output has been
// relayed and drained, so on stdout the line comes after all of it.
func writeResult(path string, f *os.File, stdout, stderr io.Writer, res any) {
	var w io.Writer = f
	switch {
	case path == "":
		return
	case path == "-":
		if stdout == nil {
			return
		}
		w = stdout
	}
	b, _ := json.Marshal(res)
	b = withErrorBytes(b, res)
	if _, err := w.Write(append(b, '\n')); err != nil && !isEPIPE(err) {
		fmt.Fprintf(stderr, "corral: --result: %v\n", err)
	}
}

// withErrorBytes adds "error_bytes" (base64) to the JSON b of a result
// whose error is not UTF-8 (it names a path or a command that is not):
// JSON text has each such byte replaced with U+FFFD, as "error" shows it.
// The same field the daemon's protocol and ls --json use for such bytes.
func withErrorBytes(b []byte, res any) []byte {
	r, ok := res.(*corral.Result)
	if !ok || utf8.ValidString(r.Error) || len(b) < 2 || b[len(b)-1] != '}' {
		return b
	}
	extra, _ := json.Marshal([]byte(r.Error))
	return append(append(b[:len(b)-1:len(b)-1], `,"error_bytes":`...), append(extra, '}')...)
}
