//go:build linux

package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/holder"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/tlsdir"
)

// holderEnv makes this test binary a terminal session's holder.
const holderEnv = "CORRAL_SERVER_TEST_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) == "1" {
		os.Exit(holder.Main(os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestReadOnlyIdentityAttachesReadOnly: a read-only identity's attach,
// though it does not ask to be read-only, is made so by the daemon: it
// gets the screen and the live output, and nothing it types or any size
// it gives reaches the session; it may read screens and wait, and may
// not open, send, resize or kill.
func TestReadOnlyIdentityAttachesReadOnly(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state, ca := t.TempDir(), filepath.Join(t.TempDir(), "ca")
	if err := tlsdir.Init(ca, tlsdir.InitOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	s, err := server.Open(server.Config{Config: daemon.Config{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Holder: []string{"/usr/bin/env", holderEnv + "=1", os.Args[0]}}, Listen: "127.0.0.1:0", TLSDir: ca})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	admin, err := client.Dial(context.Background(), s.Addr().String(), client.TLS(ca))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Kill(context.Background(), true)
		admin.Close()
		cancel()
		<-served
	})
	if _, err := admin.TermOpen(context.Background(), "ro", client.TermOpenOptions{Command: []string{"sh"}, Cwd: "/tmp",
		Env: []string{mark, "PS1=$ "}, Cols: 80, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	if w, err := admin.TermWait(context.Background(), "ro", client.TermWaitOptions{Text: `^\$`, Timeout: 10 * time.Second}); err != nil || w.Reason != "text" {
		t.Fatalf("the prompt: %+v %v", w, err)
	}
	viewerDir := filepath.Join(t.TempDir(), "viewer")
	if _, err := tlsdir.Issue(ca, "viewer", tlsdir.IssueOptions{ReadOnly: true}, viewerDir); err != nil {
		t.Fatal(err)
	}
	viewer, err := client.Dial(context.Background(), s.Addr().String(), client.TLS(viewerDir))
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	actx, acancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer acancel()
	a, err := viewer.TermAttach(actx, "ro", client.TermAttachOptions{Cols: 40, Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Write([]byte("echo typed-by-viewer\r"))
	a.Resize(30, 8)
	if err := admin.TermSendKeys(context.Background(), "ro", []byte("echo from-admin"), []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	buf := make([]byte, 32<<10)
	for !strings.Contains(seen.String(), "from-admin\r\n") {
		n, err := a.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("the read-only attach: %v, saw %q", err, seen.String())
		}
	}
	scr, err := viewer.TermScreen(context.Background(), "ro", client.TermScreenOptions{})
	if err != nil {
		t.Fatalf("read-only screen: %v", err)
	}
	if strings.Contains(scr.Text, "typed-by-viewer") || scr.Cols != 80 || scr.Rows != 24 {
		t.Errorf("a read-only attach typed or resized (%dx%d):\n%s", scr.Cols, scr.Rows, scr.Text)
	}
	for what, err := range map[string]error{
		"open": func() error {
			_, err := viewer.TermOpen(context.Background(), "v", client.TermOpenOptions{Cwd: "/tmp"})
			return err
		}(),
		"send":   viewer.TermSend(context.Background(), "ro", []byte("x")),
		"resize": viewer.TermResize(context.Background(), "ro", 50, 10),
		"kill":   func() error { _, err := viewer.Kill(context.Background(), false, "ro"); return err }(),
	} {
		if !errors.Is(err, client.ErrPermission) || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("read-only %s: %v", what, err)
		}
	}
}

// TestTermScreenPastFourMiB: a terminal screen asked with its whole
// scrollback, more than 4 MiB of text (the scrollback budget is 8 MiB), is
// answered whole. Before, the daemon's write refused a reply over the 4 MiB
// bound of a client's control frames and dropped the connection: the
// client said "lost the daemon: EOF". An answer over what one reply may
// carry is an error saying what to ask for, and the connection serves on.
func TestTermScreenPastFourMiB(t *testing.T) {
	mark := testproc.Guard(t, 90*time.Second)
	c := serveDaemon(t, server.Config{Config: daemon.Config{Holder: []string{"/usr/bin/env", holderEnv + "=1", os.Args[0]}}})
	ctx := context.Background()
	t.Cleanup(func() { c.Kill(ctx, true) })
	if _, err := c.TermOpen(ctx, "big", client.TermOpenOptions{Command: []string{"sh"}, Cwd: "/tmp",
		Env: []string{mark, "PS1=$ "}, Cols: 100, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	const rows = 80000 // 80,000 rows of 72 characters: 5.8 MB
	if err := c.TermSend(ctx, "big", []byte("awk 'BEGIN { for (i = 1; i <= "+strconv.Itoa(rows)+"; i++) printf \"row %06d "+strings.Repeat("x", 60)+"\\n\", i }'; echo end-of-rows\r")); err != nil {
		t.Fatal(err)
	}
	if w, err := c.TermWait(ctx, "big", client.TermWaitOptions{Text: `^end-of-rows$`, Timeout: 60 * time.Second}); err != nil || w.Reason != "text" {
		t.Fatalf("the rows: %+v %v", w, err)
	}
	s, err := c.TermScreen(ctx, "big", client.TermScreenOptions{Scrollback: -1})
	if err != nil {
		t.Fatalf("the screen with its whole scrollback: %v", err)
	}
	all := strings.Join(s.Scrollback, "\n") + "\n" + s.Text
	// (The budget counts each row's own cost too: the oldest rows are gone.)
	if n := len(all); n < 4<<20 || !strings.Contains(all, "row 080000 ") {
		t.Fatalf("%d bytes of scrollback and screen, the last row there: %v", n, strings.Contains(all, "row 080000 "))
	}

	defer server.SetMaxReply(1 << 20)()
	_, err = c.TermScreen(ctx, "big", client.TermScreenOptions{Scrollback: -1})
	if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "fewer scrollback rows") {
		t.Fatalf("an answer over the bound: %v", err)
	}
	if _, err := c.TermScreen(ctx, "big", client.TermScreenOptions{Scrollback: 100}); err != nil {
		t.Fatalf("the next call: %v", err)
	}
}
