//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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

// vmKB returns a field of /proc/PID/status in KiB (VmRSS, VmHWM).
func vmKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("daemon %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// h2Dial opens a raw HTTP/2 connection to the daemon's socket (preface and
// empty SETTINGS sent), as a client that ignores what the server asks can.
func h2Dial(sock string) (net.Conn, *http2.Framer, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, nil, err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, fr, nil
}

// callHeaders is the HPACK block of a gRPC call to method with extra
// bytes of metadata (in 1 MiB values).
func callHeaders(method string, extra int) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method},
		{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	val := strings.Repeat("m", 1<<20)
	for i := 0; i < extra>>20; i++ {
		enc.WriteField(hpack.HeaderField{Name: "x-big-" + strconv.Itoa(i), Value: val})
	}
	return buf.Bytes()
}

// writeHeaders sends block on stream id as one HEADERS frame and as many
// CONTINUATION frames as it takes.
func writeHeaders(fr *http2.Framer, id uint32, block []byte, endStream bool) error {
	const chunk = 16 << 10
	first := block[:min(chunk, len(block))]
	rest := block[len(first):]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(rest) == 0}); err != nil {
		return err
	}
	for len(rest) > 0 {
		n := min(chunk, len(rest))
		if err := fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// drain reads what the server sends until it closes the connection or
// the deadline passes.
func drain(c net.Conn) { io.Copy(io.Discard, c) }

// TestDaemonMemoryBoundedUnderHostileClients: clients of the daemon's own
// uid that send calls with 15 MB of metadata each (40 at once), open
// hundreds of streams each sending the start of a maximal message, or
// open hundreds of idle connections, leave the daemon's peak RSS under
// rssBound, and it goes on serving a normal client.
//
// rssBound: the daemon's own baseline (a Go program with its gRPC server
// and store mapped, tens of MiB) plus what the limits in
// internal/daemon/limits.go let these clients make it hold: at most 64
// connections, each with at most a 64 KiB header block, 4 streams with a
// 64 KiB window each and a 1 MiB connection window, and two 32 KiB
// buffers: about 64 × 1.4 MiB = 90 MiB if every byte were held at once,
// far less in practice. Before those limits, the first attack alone took
// the daemon past 1 GiB.
func TestDaemonMemoryBoundedUnderHostileClients(t *testing.T) {
	const rssBound = 128 << 10 // KiB
	e := newDaemonEnv(t)
	if out, rc := e.exec("live", "echo up"); rc != 0 || out != "up\n" {
		t.Fatalf("live: %q %d", out, rc)
	}
	pid := e.daemonPid()
	sock := filepath.Join(e.state, "corral.sock")
	t.Logf("daemon RSS at start: %d KiB (peak %d KiB)", vmKB(t, pid, "VmRSS"), vmKB(t, pid, "VmHWM"))
	serves := func(what string) {
		t.Helper()
		began := time.Now()
		if out, rc := e.exec("live", "echo still"); rc != 0 || out != "still\n" {
			t.Fatalf("after %s: the daemon does not serve a normal client: %q %d", what, out, rc)
		}
		t.Logf("after %s: a normal call took %v; RSS %d KiB, peak %d KiB", what, time.Since(began).Round(time.Millisecond),
			vmKB(t, pid, "VmRSS"), vmKB(t, pid, "VmHWM"))
	}
	attack := func(n int, one func(i int)) {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) { defer wg.Done(); one(i) }(i)
		}
		wg.Wait()
	}

	// 40 calls at once, each with 15 MB of metadata.
	block := callHeaders("/corral.v1.Daemon/List", 15<<20)
	attack(40, func(int) {
		c, fr, err := h2Dial(sock)
		if err != nil {
			return
		}
		defer c.Close()
		go drain(c)
		writeHeaders(fr, 1, block, true)
		time.Sleep(time.Second)
	})
	serves("40 calls with 15 MB of metadata")

	// 8 connections with 200 streams each, every stream the start of a
	// 4 MiB Exec message (as much as the default window takes).
	head := callHeaders("/corral.v1.Daemon/Exec", 0)
	msg := make([]byte, 5+60<<10)
	binary.BigEndian.PutUint32(msg[1:5], 4<<20)
	attack(8, func(int) {
		c, fr, err := h2Dial(sock)
		if err != nil {
			return
		}
		defer c.Close()
		go drain(c)
		for s := uint32(1); s < 400; s += 2 {
			if writeHeaders(fr, s, head, false) != nil || fr.WriteData(s, false, msg) != nil {
				return
			}
		}
		time.Sleep(2 * time.Second)
	})
	serves("1600 streams")

	// 300 connections that never make a call.
	var idle []net.Conn
	for i := 0; i < 300; i++ {
		if c, _, err := h2Dial(sock); err == nil {
			idle = append(idle, c)
		}
	}
	time.Sleep(2 * time.Second)
	peak := vmKB(t, pid, "VmHWM")
	for _, c := range idle {
		c.Close()
	}
	serves("300 idle connections")
	if peak > rssBound {
		t.Errorf("the daemon's peak RSS was %d KiB, over the bound of %d KiB", peak, rssBound)
	}
}
