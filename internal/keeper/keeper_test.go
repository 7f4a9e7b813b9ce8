//go:build linux

package keeper

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/session"
)

// startKeeper serves a keeper in this process and returns a client of it.
func startKeeper(t *testing.T, mark string) (pb.KeeperClient, *Keeper, string) {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	sock := filepath.Join(dir, "k.sock")
	k, err := Listen(Config{Name: "t", Socket: sock, Session: session.Config{Shell: "bash", Dir: dir, Env: testproc.Env(mark)}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { k.Serve(context.Background()); close(served) }()
	t.Cleanup(func() { k.stop(); <-served })
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewKeeperClient(conn), k, sock
}

// execute runs a command through the keeper and collects what comes back.
func execute(t *testing.T, ctx context.Context, c pb.KeeperClient, start *pb.ExecStart, stdin string) (string, string, *pb.Result, error) {
	t.Helper()
	st, err := c.Exec(ctx)
	if err != nil {
		return "", "", nil, err
	}
	start.Stdin = stdin != ""
	if err := st.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: start}}); err != nil {
		return "", "", nil, err
	}
	if stdin != "" {
		st.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Stdin{Stdin: []byte(stdin)}})
		st.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_StdinEof{StdinEof: true}})
	}
	var out, errb strings.Builder
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return out.String(), errb.String(), nil, io.ErrUnexpectedEOF
		}
		if err != nil {
			return out.String(), errb.String(), nil, err
		}
		switch x := m.Msg.(type) {
		case *pb.ExecResponse_Stdout:
			out.Write(x.Stdout)
		case *pb.ExecResponse_Stderr:
			errb.Write(x.Stderr)
		case *pb.ExecResponse_Result:
			return out.String(), errb.String(), x.Result, nil
		}
	}
}

func TestKeeperExecPersistsAndStreams(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	c, _, sock := startKeeper(t, mark)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi.Mode(), err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	if _, _, r, err := execute(t, ctx, c, &pb.ExecStart{Command: "cd " + dir + "; export K=v"}, ""); err != nil || r.Outcome != "exited" {
		t.Fatalf("%+v %v", r, err)
	}
	out, errs, r, err := execute(t, ctx, c, &pb.ExecStart{Command: `echo "$PWD $K"; echo e >&2`}, "")
	if err != nil || out != dir+" v\n" || errs != "e\n" || r.ExitCode != 0 {
		t.Fatalf("%q %q %+v %v", out, errs, r, err)
	}
	out, _, _, err = execute(t, ctx, c, &pb.ExecStart{Command: "cat; echo end"}, "fed\n")
	if err != nil || out != "fed\nend\n" {
		t.Fatalf("stdin: %q %v", out, err)
	}
	info, err := c.Info(ctx, &pb.KeeperInfoRequest{})
	if err != nil || info.Cwd != dir || info.Pid != int32(os.Getpid()) || info.ShellPid == 0 {
		t.Fatalf("info %+v %v", info, err)
	}
	_, _, r, _ = execute(t, ctx, c, &pb.ExecStart{Command: "sleep 60", TimeoutMs: 200}, "")
	if r == nil || r.Outcome != "timeout" {
		t.Fatalf("timeout: %+v", r)
	}
	out, _, _, _ = execute(t, ctx, c, &pb.ExecStart{Command: "cd /; echo $PWD", Oneshot: true, Cwd: dir, Env: testproc.Env(mark)}, "")
	if out != "/\n" {
		t.Fatalf("oneshot: %q", out)
	}
}

func TestKeeperClientGoneCancelsTheCommand(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	c, _, _ := startKeeper(t, mark)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: &pb.ExecStart{Command: "sleep 60 & setsid sleep 60 & echo up; wait"}}})
	if m, err := st.Recv(); err != nil || string(m.GetStdout()) != "up\n" {
		t.Fatalf("%v %v", m, err)
	}
	cancel()
	deadline := time.Now().Add(2 * time.Second)
	for len(testproc.Survivors(mark)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := testproc.Survivors(mark); len(left) > 0 {
		t.Fatalf("the tree outlived its client: %v", left)
	}
	// The session works for the next call (on a fresh shell).
	out, _, _, err := execute(t, context.Background(), c, &pb.ExecStart{Command: "echo next"}, "")
	if err != nil || out != "next\n" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestKeeperRefusesALiveSocketAndReplacesAStaleOne(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	_, _, sock := startKeeper(t, mark)
	if _, err := Listen(Config{Name: "t2", Socket: sock, Session: session.Config{Shell: "bash"}}); err == nil || !strings.Contains(err.Error(), "another process is serving") {
		t.Fatalf("second keeper on a live socket: %v", err)
	}
	stale := filepath.Join(t.TempDir(), "stale.sock")
	os.WriteFile(stale, nil, 0o600)
	k, err := Listen(Config{Name: "t3", Socket: stale, Session: session.Config{Shell: "bash", Env: testproc.Env(mark)}})
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	k.stop()
}

func TestKeeperShutdown(t *testing.T) {
	mark := testproc.Guard(t, 30*time.Second)
	c, k, sock := startKeeper(t, mark)
	execute(t, context.Background(), c, &pb.ExecStart{Command: "sleep 60 &"}, "")
	if _, err := c.Shutdown(context.Background(), &pb.ShutdownRequest{}); err != nil {
		t.Fatal(err)
	}
	// A second request (a retry, a second client) is harmless: it is
	// answered or refused, but never brings the keeper down.
	c.Shutdown(context.Background(), &pb.ShutdownRequest{})
	select {
	case <-k.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not end")
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(sock); err != nil && len(testproc.Survivors(mark)) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after shutdown: socket or processes left (%v)", testproc.Survivors(mark))
}
