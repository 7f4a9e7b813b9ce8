package wire

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/corral-dev/corral"
)

// TestExecBytesRoundTrip: a command, paths and environment entries that
// are not UTF-8 arrive exactly as sent. Before version 2 they were JSON
// strings, which encoding/json silently changes (each invalid byte became
// U+FFFD), so the daemon refused them.
func TestExecBytesRoundTrip(t *testing.T) {
	env := []string{"PATH=/bin", "A=caf\xe9", "N\xe9=v", "U=ünï", "B=\xff\xfe"}
	sent := Exec{Session: "s", Command: "printf '\xe9' > caf\xe9", Dir: "/tmp/d\xe9", Cwd: "/tmp/c\xff", Env: env}
	e := sent
	if !e.EncodeBytes() {
		t.Fatal("EncodeBytes found nothing to carry")
	}
	if env[1] != "A=caf\xe9" || env[2] != "N\xe9=v" {
		t.Fatalf("the caller's environment was changed: %q", env)
	}
	b, err := json.Marshal(Call{Call: CallExec, Exec: &e})
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(b) || strings.Contains(string(b), "\ufffd") && !strings.Contains(string(b), `"dir":"/tmp/d\ufffd"`) {
		t.Fatalf("the call's JSON: %s", b)
	}
	// What a version-1 reader sees: text, with "" for the command and the
	// entries it would only get wrong.
	var old struct {
		Exec struct {
			Command, Dir, Cwd string
			Env               []string
		}
	}
	json.Unmarshal(b, &old)
	if old.Exec.Command != "" || old.Exec.Dir != "/tmp/d\ufffd" || old.Exec.Cwd != "/tmp/c\ufffd" || old.Exec.Env[1] != "" || old.Exec.Env[3] != "U=ünï" {
		t.Errorf("as text: %+v", old.Exec)
	}
	var got Call
	if err := Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	if werr := got.Exec.DecodeBytes(); werr != nil {
		t.Fatal(werr)
	}
	g := got.Exec
	if g.Command != sent.Command || g.Dir != sent.Dir || g.Cwd != sent.Cwd || strings.Join(g.Env, "\x00") != strings.Join(env, "\x00") || g.HasBytes() {
		t.Errorf("received %q %q %q %q (bytes left %v)", g.Command, g.Dir, g.Cwd, g.Env, g.HasBytes())
	}

	// UTF-8 throughout: the JSON is version 1's, byte for byte.
	plain := Exec{Session: "s", Command: "echo é", Dir: "/tmp", Env: []string{"A=é"}}
	before, _ := json.Marshal(plain)
	if plain.EncodeBytes() {
		t.Error("EncodeBytes found bytes in UTF-8")
	}
	if after, _ := json.Marshal(plain); string(after) != string(before) {
		t.Errorf("UTF-8 JSON changed:\n%s\n%s", before, after)
	}

	// An env_bytes index outside env is refused, saying so.
	for _, body := range []string{`{"env":["A=1"],"env_bytes":{"1":"QT0y"}}`, `{"env_bytes":{"-1":"QT0y"}}`} {
		var e Exec
		if err := Decode([]byte(body), &e); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if werr := e.DecodeBytes(); werr == nil || werr.Kind != KindBadRequest || !strings.Contains(werr.Message, "env_bytes names entry") {
			t.Errorf("%s: %v", body, werr)
		}
	}
}

// TestResultAndSessionBytes: a session's cwd and a result's error that
// are not UTF-8 reach the client exactly.
func TestResultAndSessionBytes(t *testing.T) {
	w := FromResult(&corral.Result{Outcome: corral.OutcomeStartFailed, Error: "cwd /tmp/caf\xe9: no such file or directory"})
	w.SetCwd("/srv/d\xe9")
	b, _ := json.Marshal(w)
	var got Result
	if err := Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	if r := got.Corral(); r.Error != "cwd /tmp/caf\xe9: no such file or directory" || got.CwdText() != "/srv/d\xe9" || got.Cwd != "/srv/d\ufffd" {
		t.Errorf("result: error %q cwd %q (text %q)", r.Error, got.CwdText(), got.Cwd)
	}
	var s Session
	s.SetCwd("/x\xff")
	b, _ = json.Marshal(Sessions{Sessions: []Session{s}})
	var ss Sessions
	Decode(b, &ss)
	if ss.Sessions[0].CwdText() != "/x\xff" {
		t.Errorf("session cwd %q", ss.Sessions[0].CwdText())
	}
	s.SetCwd("/ok/é")
	if b, _ := json.Marshal(s); strings.Contains(string(b), "cwd_bytes") {
		t.Errorf("a UTF-8 cwd got cwd_bytes: %s", b)
	}
}

// benchExec is a call as the CLI sends it: this process's environment
// (padded to 60 entries) and a short command.
func benchExec() Exec {
	env := os.Environ()
	for i := len(env); i < 60; i++ {
		env = append(env, fmt.Sprintf("VAR%d=%s", i, strings.Repeat("v", 40)))
	}
	return Exec{Session: "s", Command: "true", Dir: "/home/user/src/project", Env: env}
}

// BenchmarkExecMarshal is what a client spends on an Exec call's JSON;
// BenchmarkExecMarshalBytes the same with the check for bytes that are
// not UTF-8 (EncodeBytes), which every call now makes: compare the two.
func BenchmarkExecMarshal(b *testing.B) {
	e := benchExec()
	for i := 0; i < b.N; i++ {
		json.Marshal(Call{Call: CallExec, Exec: &e})
	}
}

func BenchmarkExecMarshalBytes(b *testing.B) {
	e := benchExec()
	for i := 0; i < b.N; i++ {
		x := e
		x.EncodeBytes()
		json.Marshal(Call{Call: CallExec, Exec: &x})
	}
}

// BenchmarkExecDecode and BenchmarkExecDecodeBytes are the daemon's side.
func BenchmarkExecDecode(b *testing.B) {
	e := benchExec()
	p, _ := json.Marshal(Call{Call: CallExec, Exec: &e})
	for i := 0; i < b.N; i++ {
		var c Call
		Decode(p, &c)
	}
}

func BenchmarkExecDecodeBytes(b *testing.B) {
	e := benchExec()
	p, _ := json.Marshal(Call{Call: CallExec, Exec: &e})
	for i := 0; i < b.N; i++ {
		var c Call
		Decode(p, &c)
		c.Exec.DecodeBytes()
	}
}
