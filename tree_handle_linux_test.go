package corral_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestOutputFilesGoStraightToTheRoot: a stream given as a file is the
// root's own descriptor (the very pipe, no relay between), none of it is
// counted or handed to the Cmd's writer, and the other stream is relayed
// as usual.
func TestOutputFilesGoStraightToTheRoot(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var st syscall.Stat_t
		if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		c := sh(iso, mark, "readlink /proc/$$/fd/1; echo direct; echo relayed >&2")
		var unused, errb strings.Builder
		c.StdoutFile, c.Stdout, c.Stderr = w, &unused, &errb
		tree, err := c.Start(context.Background())
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		res, err := tree.Wait()
		if err != nil {
			t.Fatalf("%+v %v", res, err)
		}
		out, _ := io.ReadAll(r)
		want := "pipe:[" + strconv.FormatUint(st.Ino, 10) + "]\ndirect\n"
		if string(out) != want {
			t.Fatalf("the root's stdout gave %q, want %q (our pipe itself)", out, want)
		}
		if unused.Len() != 0 || res.StdoutBytes != 0 {
			t.Fatalf("a direct stream was relayed: writer %q, %d bytes counted", unused.String(), res.StdoutBytes)
		}
		if errb.String() != "relayed\n" || res.StderrBytes != 8 || res.FirstOutput < 0 {
			t.Fatalf("stderr %q, result %+v", errb.String(), res)
		}
	})
}

// TestStopWithSignalAndEscalation: StopWith's signal is the first one the
// tree gets, and closing its escalate channel ends the grace at once.
func TestStopWithSignalAndEscalation(t *testing.T) {
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		c := sh(iso, mark, "trap 'echo got-INT; exit 5' INT; echo ready; while :; do sleep 0.05; done")
		tree, w := startReady(t, c)
		tree.StopWith(syscall.SIGINT, 20*time.Second, nil)
		res, err := tree.Wait()
		if !strings.Contains(w.String(), "got-INT") || res.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrStopped) {
			t.Fatalf("output %q, %+v %v", w.String(), res, err)
		}
		if res.ExitCode != 5 {
			t.Fatalf("the root's own exit after SIGINT: %+v", res)
		}

		c = sh(iso, mark, "trap '' INT TERM; echo ready; while :; do sleep 0.05; done")
		tree, _ = startReady(t, c)
		esc := make(chan struct{})
		time.AfterFunc(200*time.Millisecond, func() { close(esc) })
		start := time.Now()
		tree.StopWith(syscall.SIGINT, 30*time.Second, esc)
		if el := time.Since(start); el > 15*time.Second {
			t.Fatalf("escalation did not end the 30s grace: %v", el)
		}
		if res, _ := tree.Wait(); res.Signal != int(syscall.SIGKILL) {
			t.Fatalf("not killed after the escalation: %+v", res)
		}
	})
}

// TestReleaseLeavesTheTreeRunning: a released tree is not signalled, its
// Wait says so at once, and the next owner (Cmd.Adopt) takes it over and
// settles it with its Cmd's grace: the root exits, a descendant that
// ignores SIGTERM is killed once that grace (not DefaultGrace) has passed.
func TestReleaseLeavesTheTreeRunning(t *testing.T) {
	if !corral.CanAdopt() {
		t.Skip("trees cannot be adopted here")
	}
	isolations(t, func(t *testing.T, iso corral.Isolation, mark string) {
		dir := t.TempDir()
		c := sh(iso, mark, "sh -c 'trap \"\" TERM; echo $$ >"+dir+"/child; exec sleep 60' & echo ready; while [ ! -e "+dir+"/quit ]; do sleep 0.02; done")
		tree, _ := startReady(t, c)
		child := testproc.PidFile(t, dir+"/child", 5*time.Second)
		id := tree.Identity()
		tree.Release()
		res, err := tree.Wait()
		if res.Outcome != corral.OutcomeCancelled || !errors.Is(err, corral.ErrReleased) {
			t.Fatalf("released: %+v %v", res, err)
		}
		tree.Stop(-1) // after the release: nothing
		time.Sleep(100 * time.Millisecond)
		if !testproc.Alive(id.Pid) || !testproc.Alive(child) {
			t.Fatal("Release (or a Stop after it) stopped the tree")
		}

		at, err := (&corral.Cmd{Grace: 100 * time.Millisecond}).Adopt(id)
		if err != nil {
			t.Fatalf("Adopt after Release: %v", err)
		}
		start := time.Now()
		os.WriteFile(dir+"/quit", nil, 0o644)
		res, _ = at.Wait()
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("the adopted tree settled after %v: its Cmd's 100ms grace was not used (DefaultGrace is %v)", el, corral.DefaultGrace)
		}
		if res.Outcome != corral.OutcomeExited || res.DescendantsKilled != 1 {
			t.Fatalf("adopted tree: %+v", res)
		}
		for _, p := range []int{id.Pid, child} {
			if testproc.Alive(p) {
				t.Fatalf("process %d of the adopted tree survived", p)
			}
		}
	})
}
