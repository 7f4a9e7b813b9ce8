package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corral-dev/corral/internal/wire"
)

// FuzzExecCall: any bytes a client sends as a call decode to an error or
// to a call whose exec request is accepted or refused at the boundary;
// nothing panics, and what is accepted has a valid name and no NUL.
func FuzzExecCall(f *testing.F) {
	for _, c := range []wire.Call{
		{Call: wire.CallExec, Exec: &wire.Exec{Session: "dev", Command: "echo hi", Dir: "/tmp", Env: []string{"A=1"}}},
		{Call: wire.CallExec, Exec: &wire.Exec{Oneshot: true, Command: "true", TimeoutMs: 100}},
		{Call: wire.CallExec, Exec: &wire.Exec{Session: "s", Command: "pwd", Cwd: "/", Stdin: true, GraceMs: -1}},
		{Call: wire.CallKill, Kill: &wire.Kill{All: true}},
	} {
		b, _ := json.Marshal(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c wire.Call
		if wire.Decode(data, &c) != nil || c.Exec == nil {
			return
		}
		r, err := request(c.Exec)
		if err == nil {
			if strings.IndexByte(r.Command, 0) >= 0 || r.Options.Timeout < 0 || (!r.Oneshot && r.Session == "") ||
				(r.Cwd != "" && !strings.HasPrefix(r.Cwd, "/")) {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}
