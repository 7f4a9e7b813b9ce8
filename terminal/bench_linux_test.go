//go:build linux

package terminal

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/corral-dev/corral/internal/testproc"
)

// Run the benchmarks one at a time, e.g.:
//
//	go test -run '^$' -bench . -benchtime 20x ./terminal

// memKiB reads Pss and the private pages (Private_Clean + Private_Dirty:
// what the process alone costs) from /proc/PID/smaps_rollup.
func memKiB(tb testing.TB, pid int) (pss, private int) {
	tb.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "Pss:":
			pss = n
		case "Private_Clean:", "Private_Dirty:":
			private += n
		}
	}
	return pss, private
}

// buildCorral builds corral (the real binary, with its `corral holder`).
func buildCorral(tb testing.TB, dir string) string {
	tb.Helper()
	bin := filepath.Join(dir, "corral")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/corral-dev/corral/cmd/corral").CombinedOutput(); err != nil {
		tb.Skipf("go build corral: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkHolderIdleMemory measures five idle 80×24 sessions running sh:
// the holder process only (the program is not counted), as `corral
// holder` and as cmd/corral-holder, against five idle Go programs and
// against tmux (its server's growth in private memory per session). PSS
// shares the binary's text among the five; private memory (clean and
// dirty, text shared by the five not included) is what one more session
// costs.
func BenchmarkHolderIdleMemory(b *testing.B) {
	mark := testproc.Guard(b, 5*time.Minute)
	dir := testproc.TempDir(b)
	bin := buildCorral(b, dir)
	idle := filepath.Join(dir, "idle")
	if out, err := exec.Command("go", "build", "-o", idle, "./testdata/idle").CombinedOutput(); err != nil {
		b.Fatalf("go build idle: %v\n%s", err, out)
	}
	const n = 5
	ctx := context.Background()
	open := func(holder []string, env []string) []*Term {
		var ts []*Term
		for i := range n {
			tm, err := Open(ctx, filepath.Join(dir, fmt.Sprintf("s%d-%d", len(holder[0])+len(holder), i)),
				Config{Path: "/bin/sh", Args: []string{"sh"}, Env: progEnv(mark), Holder: holder, HolderEnv: env})
			if err != nil {
				b.Fatal(err)
			}
			ts = append(ts, tm)
			b.Cleanup(func() { tm.Close(context.Background()) })
		}
		return ts
	}
	measure := func(ts []*Term) (pss1, pssAvg, priv float64) {
		for _, tm := range ts {
			tm.Wait(ctx, WaitOptions{Idle: 500 * time.Millisecond, Timeout: 10 * time.Second})
		}
		time.Sleep(time.Second)
		for i, tm := range ts {
			p, pr := memKiB(b, tm.HolderPid())
			if i == 0 {
				pss1 = float64(p)
			}
			pssAvg += float64(p) / float64(len(ts))
			priv += float64(pr) / float64(len(ts))
		}
		return
	}
	corral := open([]string{bin, "holder"}, testproc.Env(mark))
	cp1, cpAvg, cpPriv := measure(corral)
	small := filepath.Join(dir, "corral-holder")
	if out, err := exec.Command("go", "build", "-o", small, "github.com/corral-dev/corral/cmd/corral-holder").CombinedOutput(); err != nil {
		b.Fatalf("go build corral-holder: %v\n%s", err, out)
	}
	smallTs := open([]string{small}, testproc.Env(mark))
	sp1, spAvg, spPriv := measure(smallTs)

	var idlePss, idlePriv float64
	for range n {
		cmd := exec.Command(idle)
		cmd.Env = testproc.Env(mark)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		bufio.NewReader(out).ReadString('\n')
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		time.Sleep(200 * time.Millisecond)
		p, pr := memKiB(b, cmd.Process.Pid)
		idlePss += float64(p) / n
		idlePriv += float64(pr) / n
	}

	var tmuxPer float64
	if _, err := exec.LookPath("tmux"); err == nil {
		p := newPane(b, mark, 80, 24, progEnv(mark), "/bin/sh")
		pid, _ := strconv.Atoi(strings.TrimSpace(p.tmux("display", "-p", "-t", "s", "#{pid}")))
		time.Sleep(500 * time.Millisecond)
		_, before := memKiB(b, pid)
		for i := range n {
			p.tmux("new-session", "-d", "-s", fmt.Sprintf("x%d", i), "-x", "80", "-y", "24", "env -i PS1='$ ' /bin/sh")
		}
		time.Sleep(time.Second)
		_, after := memKiB(b, pid)
		tmuxPer = float64(after-before) / n
	}
	for range b.N {
	}
	b.ReportMetric(cp1, "corral-holder-pss-KiB(1st)")
	b.ReportMetric(cpAvg, "corral-holder-pss-KiB(avg5)")
	b.ReportMetric(cpPriv, "corral-holder-private-KiB")
	b.ReportMetric(sp1, "corral-holder-bin-pss-KiB(1st)")
	b.ReportMetric(spAvg, "corral-holder-bin-pss-KiB(avg5)")
	b.ReportMetric(spPriv, "corral-holder-bin-private-KiB")
	b.ReportMetric(idlePss, "idle-go-pss-KiB")
	b.ReportMetric(idlePriv, "idle-go-private-KiB")
	b.ReportMetric(tmuxPer, "tmux-private-KiB/session")
}

// BenchmarkAttachFirstScreen: from Attach to the first screen in hand,
// against tmux attach in a PTY until the screen is drawn (which includes
// starting the tmux client process).
func BenchmarkAttachFirstScreen(b *testing.B) {
	mark := testproc.Guard(b, 5*time.Minute)
	b.Run("holder", func(b *testing.B) {
		tm := openBench(b, mark)
		ctx := context.Background()
		tm.Send(ctx, []byte("echo first-screen-marker\r"))
		tm.Wait(ctx, WaitOptions{Text: "(?m)^first-screen-marker$", Timeout: 10 * time.Second})
		buf := make([]byte, 64<<10)
		b.ResetTimer()
		for range b.N {
			a, err := tm.Attach(ctx, AttachOptions{})
			if err != nil {
				b.Fatal(err)
			}
			var got []byte
			for !bytes.Contains(got, []byte("first-screen-marker\r\n")) {
				n, err := a.Read(buf)
				if err != nil {
					b.Fatal(err)
				}
				got = append(got, buf[:n]...)
			}
			a.Close()
		}
	})
	// The reattach case: 120×40 with 2,000 rows of scrollback,
	// all of it redrawn.
	b.Run("holder-120x40-scrollback2000", func(b *testing.B) {
		dir := filepath.Join(testproc.TempDir(b), "sess")
		tm, err := Open(context.Background(), dir, Config{Path: "/bin/sh", Args: []string{"sh"}, Env: progEnv(mark),
			Cols: 120, Rows: 40, Holder: []string{os.Args[0]}, HolderEnv: append(testproc.Env(mark), holderEnv+"=1")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tm.Close(context.Background()) })
		ctx := context.Background()
		tm.Send(ctx, []byte("i=0; while [ $i -lt 2100 ]; do printf '%05d \033[1;3%dmcoloured\033[0m text of a scrollback row, long enough to be typical of one\n' $i $((i%8)); i=$((i+1)); done; echo first-screen-marker\r"))
		tm.Wait(ctx, WaitOptions{Text: "(?m)^first-screen-marker$", Timeout: 60 * time.Second})
		s, _ := tm.Screen(ctx, ScreenOptions{Scrollback: -1})
		if len(s.Scrollback) < 2000 {
			b.Fatalf("only %d scrollback rows", len(s.Scrollback))
		}
		buf := make([]byte, 64<<10)
		b.ResetTimer()
		for range b.N {
			a, err := tm.Attach(ctx, AttachOptions{Scrollback: 2000})
			if err != nil {
				b.Fatal(err)
			}
			var got []byte
			for !bytes.Contains(got, []byte("first-screen-marker\r\n")) {
				n, err := a.Read(buf)
				if err != nil {
					b.Fatal(err)
				}
				got = append(got, buf[:n]...)
			}
			a.Close()
		}
	})
	b.Run("tmux", func(b *testing.B) {
		if _, err := exec.LookPath("tmux"); err != nil {
			b.Skip("no tmux")
		}
		p := newPane(b, mark, 80, 24, progEnv(mark), "/bin/sh", "-c", "echo first-screen-marker; exec sleep 600")
		p.screen()
		b.ResetTimer()
		for range b.N {
			cmd := exec.Command("tmux", "-S", p.sock, "-f", p.conf, "attach", "-t", "s")
			cmd.Env = append(p.env, "TERM=xterm-256color")
			f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
			if err != nil {
				b.Fatal(err)
			}
			readUntil(b, f, "first-screen-marker")
			cmd.Process.Kill()
			cmd.Wait()
			f.Close()
		}
	})
}

func openBench(b *testing.B, mark string) *Term {
	b.Helper()
	dir := filepath.Join(testproc.TempDir(b), "sess")
	tm, err := Open(context.Background(), dir, Config{Path: "/bin/sh", Args: []string{"sh"}, Env: progEnv(mark),
		Holder: []string{os.Args[0]}, HolderEnv: append(testproc.Env(mark), holderEnv+"=1")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tm.Close(context.Background()) })
	return tm
}

func readUntil(b *testing.B, f *os.File, marker string) {
	b.Helper()
	buf := make([]byte, 64<<10)
	var tail []byte
	m := []byte(marker)
	for {
		n, err := f.Read(buf)
		tail = append(tail, buf[:n]...)
		if bytes.Contains(tail, m) {
			return
		}
		if len(tail) > len(m) {
			tail = tail[len(tail)-len(m):]
		}
		if err != nil {
			b.Fatalf("read until %q: %v", marker, err)
		}
	}
}

// BenchmarkThroughput: cat of a 16 MB text file through a terminal
// session to an attached client, against a bare creack/pty read of the
// same cat, and against tmux with an attached client.
func BenchmarkThroughput(b *testing.B) {
	mark := testproc.Guard(b, 10*time.Minute)
	dir := testproc.TempDir(b)
	file := filepath.Join(dir, "text")
	var w bytes.Buffer
	for i := 0; w.Len() < 16<<20; i++ {
		fmt.Fprintf(&w, "%08d the quick brown fox jumps over the lazy dog, again and again and again.\n", i)
	}
	if err := os.WriteFile(file, w.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	size := int64(w.Len())
	b.Run("bare-pty", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 32<<10)
		for range b.N {
			cmd := exec.Command("cat", file)
			cmd.Env = testproc.Env(mark)
			f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := f.Read(buf); err != nil {
					break
				}
			}
			cmd.Wait()
			f.Close()
		}
	})
	b.Run("holder", func(b *testing.B) {
		tm := openBench(b, mark)
		ctx := context.Background()
		a, err := tm.Attach(ctx, AttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		buf := make([]byte, 64<<10)
		b.SetBytes(size)
		b.ResetTimer()
		for i := range b.N {
			marker := fmt.Sprintf("DONE-%d", i)
			a.Write([]byte(fmt.Sprintf("cat %s; printf 'DONE-%%d\\n' %d\r", file, i)))
			var tail []byte
			for !bytes.Contains(tail, []byte(marker+"\r\n")) {
				n, err := a.Read(buf)
				if err != nil {
					b.Fatal(err)
				}
				tail = append(tail, buf[:n]...)
				if len(tail) > 64 {
					tail = tail[len(tail)-64:]
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(a.Resyncs()), "resyncs")
	})
	b.Run("tmux", func(b *testing.B) {
		if _, err := exec.LookPath("tmux"); err != nil {
			b.Skip("no tmux")
		}
		p := newPane(b, mark, 80, 24, progEnv(mark), "/bin/sh")
		p.screen()
		cmd := exec.Command("tmux", "-S", p.sock, "-f", p.conf, "attach", "-t", "s")
		cmd.Env = append(p.env, "TERM=xterm-256color")
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait(); f.Close() }()
		b.SetBytes(size)
		b.ResetTimer()
		for i := range b.N {
			f.Write([]byte(fmt.Sprintf("cat %s; printf 'DONE-%%d.\\n' %d\r", file, i)))
			readUntil(b, f, fmt.Sprintf("DONE-%d.", i))
		}
	})
}
