//go:build linux

package server_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/wire"
)

// TestAttackBytes: a hostile client puts bytes that are not UTF-8 in
// every string field of every call, raw in the JSON or in the _bytes
// fields, well or badly formed. A raw invalid byte anywhere in a call is
// refused (bad_request, naming its offset and the _bytes fields), since
// encoding/json would replace it and the command would run changed; the
// _bytes fields carry such bytes exactly; a malformed one is refused
// saying what is wrong. Nothing crashes, nothing refused runs, and the
// connection goes on serving.
func TestAttackBytes(t *testing.T) {
	mark := testproc.Guard(t, 120*time.Second)
	env := testproc.Env(mark)
	c := serveDaemon(t, server.Config{Config: daemon.Config{}})
	state := c.StateDir()
	witness := filepath.Join(t.TempDir(), "ran")
	run := `echo ran >> ` + witness
	wc := rawConn(t, state)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	// Raw bytes that are not UTF-8, in each string field.
	exec := func(fields string) string {
		return `{"call":"exec","exec":{"session":"j","command":"` + run + `","dir":"/"` + fields + `}}`
	}
	for _, tc := range []struct{ name, body string }{
		{"the call's name", "{\"call\":\"li\xffst\"}"},
		{"a kill's name", "{\"call\":\"kill\",\"kill\":{\"names\":[\"s\xe9\"]}}"},
		{"the session", "{\"call\":\"exec\",\"exec\":{\"session\":\"j\xe9\",\"command\":\"" + run + "\",\"dir\":\"/\"}}"},
		{"the command", "{\"call\":\"exec\",\"exec\":{\"session\":\"j\",\"command\":\"" + run + "\xe9\",\"dir\":\"/\"}}"},
		{"the dir", exec(",\"dir\":\"/tmp/\xe9\"")},
		{"the cwd", exec(",\"cwd\":\"/tmp/\xe9\"")},
		{"an env name", exec(",\"env\":[\"N\xe9=v\"]")},
		{"an env value", exec(",\"env\":[\"N=v\xe9\"]")},
		{"an unknown field", exec(",\"later\":\"\xff\"")},
		{"a key", exec(",\"\xff\":1")},
		{"a _bytes field", exec(",\"command_bytes\":\"\xff\"")},
	} {
		t.Run("raw "+tc.name, func(t *testing.T) {
			at := bytes.IndexFunc([]byte(tc.body), func(r rune) bool { return r == '\uFFFD' })
			if err := wc.WriteFrame(wire.FrameCall, []byte(tc.body)); err != nil {
				t.Fatal(err)
			}
			e := expectError(t, wc, wire.KindBadRequest, fmt.Sprintf("not valid UTF-8 (at byte %d)", at))
			if !strings.Contains(e.Message, "command_bytes") {
				t.Errorf("the refusal does not say how to send such bytes: %s", e.Message)
			}
		})
	}

	// Malformed _bytes fields.
	for _, tc := range []struct{ name, fields, want string }{
		{"not base64", `,"command_bytes":"!!!"`, "malformed message"},
		{"a number", `,"cwd_bytes":7`, "malformed message"},
		{"an env index past env", `,"env":["A=1"],"env_bytes":{"1":"` + b64("B=\xe9") + `"}`, "env_bytes names entry 1, and env has 1 entries"},
		{"a negative env index", `,"env":["A=1"],"env_bytes":{"-1":"` + b64("B=\xe9") + `"}`, "env_bytes names entry -1"},
		{"an env index that is no number", `,"env":["A=1"],"env_bytes":{"x":"` + b64("B=\xe9") + `"}`, "malformed message"},
		{"an env entry without =", `,"env":[""],"env_bytes":{"0":"` + b64("B\xe9") + `"}`, "malformed environment entry"},
		{"an env entry with NUL", `,"env":[""],"env_bytes":{"0":"` + b64("B=\xe9\x00C=1") + `"}`, "malformed environment entry"},
		{"a command with NUL", `,"command_bytes":"` + b64(run+"\x00\xe9") + `"`, "NUL byte in command"},
		{"a command past its bound", `,"command_bytes":"` + b64(strings.Repeat("\xe9", wire.MaxCommand+1)) + `"`, fmt.Sprintf("command of %d bytes", wire.MaxCommand+1)},
		{"a relative dir", `,"dir_bytes":"` + b64("tmp/\xe9") + `"`, "is not absolute"},
		{"a cwd with NUL", `,"cwd_bytes":"` + b64("/tmp/\xe9\x00") + `"`, "NUL byte in cwd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := wc.WriteFrame(wire.FrameCall, []byte(exec(tc.fields))); err != nil {
				t.Fatal(err)
			}
			expectError(t, wc, wire.KindBadRequest, tc.want)
		})
	}
	if b, err := os.ReadFile(witness); err == nil {
		t.Fatalf("a refused call ran its command: %q", b)
	}

	// Well formed, they are carried exactly: the command, an environment
	// name and value, the dir and the cwd, and the cwd after the command.
	dir := filepath.Join(t.TempDir(), "d\xe9")
	os.Mkdir(dir, 0o700)
	out := filepath.Join(t.TempDir(), "out")
	e := wire.Exec{Session: "b", Command: "printf '%s|%s|\xe9|' \"$V\" \"$PWD\" > " + out + "; tr '\\0' '\\n' < /proc/$$/environ | LC_ALL=C grep -a '^N\xe9=' >> " + out + "; cd ..",
		Dir: "/", Cwd: dir, Env: append(append([]string(nil), env...), "V=\xff", "N\xe9=\xfe")}
	if !e.EncodeBytes() {
		t.Fatal("nothing to carry")
	}
	_, typ, b := execRaw(t, wc, &e)
	var r wire.Result
	if typ != wire.FrameReply || wire.Decode(b, &r) != nil || r.Outcome != "exited" || r.ExitCode != 0 {
		t.Fatalf("exec with _bytes: %q %s", typ, b)
	}
	if got, _ := os.ReadFile(out); string(got) != "\xff|"+dir+"|\xe9|N\xe9=\xfe\n" {
		t.Errorf("the command saw %q", got)
	}
	if r.CwdText() != filepath.Dir(dir) {
		t.Errorf("cwd after the command %q (cwd_bytes %q)", r.Cwd, r.CwdBytes)
	}
	// A start failure names the path exactly (error_bytes).
	e = wire.Exec{Session: "b", Command: "true", Dir: "/", Cwd: dir + "/gone\xff"}
	e.EncodeBytes()
	_, typ, b = execRaw(t, wc, &e)
	r = wire.Result{}
	if typ != wire.FrameReply || wire.Decode(b, &r) != nil || r.Outcome != "start_failed" || !strings.Contains(r.Corral().Error, dir+"/gone\xff") {
		t.Errorf("a start failure: %q %s", typ, b)
	}
	// The list shows the session's cwd exactly.
	if err := wc.WriteJSON(wire.FrameCall, wire.Call{Call: wire.CallList}); err != nil {
		t.Fatal(err)
	}
	typ, b, err := wc.ReadFrame(wire.MaxControl)
	var ss wire.Sessions
	if err != nil || typ != wire.FrameReply || wire.Decode(b, &ss) != nil || len(ss.Sessions) != 1 || ss.Sessions[0].CwdText() != filepath.Dir(dir) {
		t.Errorf("list: %q %s %v", typ, b, err)
	}
	// A Hello with such bytes is refused, saying what it got.
	nc := dialRaw(t, state)
	nc.Write(frame(wire.FrameHello, []byte("{\"protocol\":\"corr\xe9l\",\"versions\":[1,2]}")))
	expectError(t, wire.NewConn(nc), wire.KindVersion, "not a corral client")
	wellBehaved(t, state, env)
}
