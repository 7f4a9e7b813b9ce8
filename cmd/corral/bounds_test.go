//go:build linux

package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/corral-dev/corral/api/corralv1"
)

// rawExec sends one ExecStart on a hand-made connection to the daemon of e
// and returns the call's error (nil if it ran, with its result).
func rawExec(t *testing.T, e *daemonEnv, start *pb.ExecStart) (*pb.Result, error) {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+filepath.Join(e.state, "corral.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := pb.NewDaemonClient(conn).Exec(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: start}}); err != nil && err != io.EOF {
		return nil, err
	}
	st.CloseSend()
	for {
		m, err := st.Recv()
		if err != nil {
			return nil, err
		}
		if r := m.GetResult(); r != nil {
			return r, nil
		}
	}
}

// TestDaemonRefusesBadCreations: a session whose cwd is missing, a file or
// longer than a path can be, or whose environment execve would refuse, is
// not created: the client gets InvalidArgument saying what is wrong (naming
// the variable), no record is left, and the name works afterwards.
func TestDaemonRefusesBadCreations(t *testing.T) {
	e := newDaemonEnv(t)
	e.exec("live", "true")
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	long := "/" + strings.Repeat("d", 5000)
	// Enough 100 KiB variables to pass a quarter of the stack limit the
	// daemon inherits from this test (ARG_MAX), within a message.
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_STACK, &rl)
	argMax := uint64(6 << 20)
	if rl.Cur != ^uint64(0) && rl.Cur/4 < argMax {
		argMax = rl.Cur / 4
	}
	var many []string
	for i := 0; i < int(argMax/(100<<10))+2; i++ {
		many = append(many, "MANY"+strings.Repeat("x", i%3)+string(rune('A'+i%26))+"="+strings.Repeat("v", 100<<10))
	}
	many = append(many, "HUGEST="+strings.Repeat("w", 120<<10))
	base := os.Environ()
	cases := []struct {
		name string
		cwd  string
		env  []string
		want string
	}{
		{"missing cwd", "/nonexistent/corral-test-dir", base, "/nonexistent/corral-test-dir"},
		{"file as cwd", file, base, "not a directory"},
		{"5000-byte cwd", long, base, "cwd of 5001 bytes"},
		{"one string over 128 KiB", "/", append(append([]string(nil), base...), "BIGVAR="+strings.Repeat("x", 200<<10)), "BIGVAR"},
		{"environment over ARG_MAX", "/", append(append([]string(nil), base...), many...), "HUGEST"},
	}
	for _, c := range cases {
		res, err := rawExec(t, e, &pb.ExecStart{Session: "bad", Command: "echo ran", Cwd: c.cwd, Env: c.env})
		if res != nil || status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: result %v, error %v; want InvalidArgument naming %q", c.name, res, err, c.want)
		}
		if s, ok := e.ls()["bad"]; ok {
			t.Fatalf("%s: a refused creation left a record: %+v", c.name, s)
		}
	}
	if _, err := os.Stat(filepath.Join(e.state, "sessions", "bad")); err == nil {
		t.Error("a refused creation left its directory")
	}
	if out, rc := e.exec("bad", "echo fine; pwd"); rc != 0 || !strings.HasPrefix(out, "fine\n") {
		t.Fatalf("the name after the refusals: %q %d", out, rc)
	}
	if s := e.ls()["live"]; s.State != "up" {
		t.Fatalf("a healthy session beside them: %+v", s)
	}
}
