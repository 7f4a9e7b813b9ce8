package daemon

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/corral-dev/corral/api/corralv1"
)

// FuzzExecRequest: any bytes a client sends decode to an error or to a
// request that CheckStart accepts or refuses; nothing panics, and what it
// accepts has a valid name and no NUL.
func FuzzExecRequest(f *testing.F) {
	for _, m := range []*pb.ExecRequest{
		{Msg: &pb.ExecRequest_Start{Start: &pb.ExecStart{Session: "dev", Command: "echo hi", Cwd: "/tmp", Env: []string{"A=1"}}}},
		{Msg: &pb.ExecRequest_Start{Start: &pb.ExecStart{Oneshot: true, Command: "true", TimeoutMs: 100}}},
		{Msg: &pb.ExecRequest_Stdin{Stdin: []byte("data")}},
		{Msg: &pb.ExecRequest_StdinEof{StdinEof: true}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.ExecRequest
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		s := m.GetStart()
		if s == nil {
			return
		}
		if CheckStart(s) == nil {
			if strings.IndexByte(s.Command, 0) >= 0 || s.TimeoutMs < 0 || (!s.Oneshot && s.Session == "") {
				t.Fatalf("accepted %v", s)
			}
		}
	})
}
