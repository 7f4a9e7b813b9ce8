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
	"syscall"
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

// BenchmarkHolderIdleMemory measures idle 80×24 sessions running sh, the
// holder process only (the program is not counted): 50 of them with
// cmd/corral-holder (CORRAL_BENCH_SESSIONS overrides it) and 5 with
// `corral holder`, against 5 idle Go programs and against 50 more
// sessions in one tmux server (its growth in private memory and PSS per
// session). PSS shares the binary's text among the holders; private
// memory (text shared by the others not included) is what one more
// session costs.
func BenchmarkHolderIdleMemory(b *testing.B) {
	mark := testproc.Guard(b, 10*time.Minute)
	dir := testproc.TempDir(b)
	n := 50
	if v, err := strconv.Atoi(os.Getenv("CORRAL_BENCH_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	bin := buildCorral(b, dir)
	idle := filepath.Join(dir, "idle")
	if out, err := exec.Command("go", "build", "-o", idle, "./testdata/idle").CombinedOutput(); err != nil {
		b.Fatalf("go build idle: %v\n%s", err, out)
	}
	ctx := context.Background()
	open := func(n int, holder []string, env []string) []*Term {
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
	corral := open(5, []string{bin, "holder"}, testproc.Env(mark))
	cp1, cpAvg, cpPriv := measure(corral)
	small := filepath.Join(dir, "corral-holder")
	if out, err := exec.Command("go", "build", "-o", small, "github.com/corral-dev/corral/cmd/corral-holder").CombinedOutput(); err != nil {
		b.Fatalf("go build corral-holder: %v\n%s", err, out)
	}
	smallTs := open(n, []string{small}, testproc.Env(mark))
	sp1, spAvg, spPriv := measure(smallTs)

	var idlePss, idlePriv float64
	for range 5 {
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
		idlePss += float64(p) / 5
		idlePriv += float64(pr) / 5
	}

	var tmuxPriv, tmuxPss float64
	if _, err := exec.LookPath("tmux"); err == nil {
		p := newPane(b, mark, 80, 24, progEnv(mark), "/bin/sh")
		pid, _ := strconv.Atoi(strings.TrimSpace(p.Run("display", "-p", "-t", "s", "#{pid}")))
		time.Sleep(500 * time.Millisecond)
		pss0, priv0 := memKiB(b, pid)
		for i := range n {
			p.Run("new-session", "-d", "-s", fmt.Sprintf("x%d", i), "-x", "80", "-y", "24", "env -i PS1='$ ' /bin/sh")
		}
		time.Sleep(time.Second)
		pss1, priv1 := memKiB(b, pid)
		tmuxPriv, tmuxPss = float64(priv1-priv0)/float64(n), float64(pss1-pss0)/float64(n)
	}
	for range b.N {
	}
	b.ReportMetric(float64(n), "sessions")
	b.ReportMetric(cp1, "corral-holder-pss-KiB(1st)")
	b.ReportMetric(cpAvg, "corral-holder-pss-KiB(avg5)")
	b.ReportMetric(cpPriv, "corral-holder-private-KiB")
	b.ReportMetric(sp1, "corral-holder-bin-pss-KiB(1st)")
	b.ReportMetric(spAvg, "corral-holder-bin-pss-KiB(avg)")
	b.ReportMetric(spPriv, "corral-holder-bin-private-KiB")
	b.ReportMetric(idlePss, "idle-go-pss-KiB")
	b.ReportMetric(idlePriv, "idle-go-private-KiB")
	b.ReportMetric(tmuxPriv, "tmux-private-KiB/session")
	b.ReportMetric(tmuxPss, "tmux-pss-KiB/session")
}

// BenchmarkAttachFirstScreen: from Attach to the first screen in hand,
// against tmux attach in a PTY until the screen is drawn (which includes
// starting the tmux client process).
func BenchmarkAttachFirstScreen(b *testing.B) {
	mark := testproc.Guard(b, 5*time.Minute)
	b.Run("holder", func(b *testing.B) {
		tm := openBench(b, mark, 0, 0)
		ctx := context.Background()
		tm.Send(ctx, []byte("echo first-screen-marker\r"))
		tm.Wait(ctx, WaitOptions{Text: "(?m)^first-screen-marker$", Timeout: 10 * time.Second})
		buf := make([]byte, 64<<10)
		b.ResetTimer()
		for range b.N {
			attachFirstScreen(b, tm, AttachOptions{}, buf)
		}
	})
	// The reattach case: 120×40 with 2,000 rows of scrollback,
	// all of it redrawn.
	b.Run("holder-120x40-scrollback2000", func(b *testing.B) {
		tm := openBench(b, mark, 120, 40)
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
			attachFirstScreen(b, tm, AttachOptions{Scrollback: 2000}, buf)
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
			cmd := p.Command("attach", "-t", "s")
			cmd.Env = append(cmd.Env, "TERM=xterm-256color")
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

// openBench opens a session of sh at cols×rows (0×0: the default size)
// with the test binary as its holder, closed at cleanup.
func openBench(b *testing.B, mark string, cols, rows int) *Term {
	b.Helper()
	dir := filepath.Join(testproc.TempDir(b), "sess")
	tm, err := Open(context.Background(), dir, Config{Path: "/bin/sh", Args: []string{"sh"}, Env: progEnv(mark),
		Cols: cols, Rows: rows, Holder: []string{os.Args[0]}, HolderEnv: append(testproc.Env(mark), holderEnv+"=1")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tm.Close(context.Background()) })
	return tm
}

// attachFirstScreen attaches to tm with o, reads (into buf) until the
// redraw has shown the line first-screen-marker, and detaches: one
// reattach, as BenchmarkAttachFirstScreen times it.
func attachFirstScreen(b *testing.B, tm *Term, o AttachOptions, buf []byte) {
	b.Helper()
	a, err := tm.Attach(context.Background(), o)
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

// catFile writes a text file of about mb MB (CORRAL_BENCH_CAT_MB, if set,
// overrides it) of 80-column lines and returns its path and size.
func catFile(tb testing.TB, mb int) (string, int64) {
	tb.Helper()
	if v, err := strconv.Atoi(os.Getenv("CORRAL_BENCH_CAT_MB")); err == nil && v > 0 {
		mb = v
	}
	file := filepath.Join(testproc.TempDir(tb), "text")
	f, err := os.Create(file)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var size int64
	for i := 0; size < int64(mb)<<20; i++ {
		n, _ := fmt.Fprintf(w, "%08d the quick brown fox jumps over the lazy dog, again and again and again\n", i)
		size += int64(n)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return file, size
}

// cpuOf is the CPU time (user + system) process pid has used.
func cpuOf(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime
	// are fields 14 and 15 of the whole line, in clock ticks (100 Hz).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkThroughput: cat of a 100 MB text file through a terminal
// session to an attached client, against a bare creack/pty read of the
// same cat and against tmux with an attached client, the three taking
// turns in each iteration so that the load of a shared machine falls on
// all of them alike. It reports each one's MB/s, the ratios to the bare
// read, and the CPU the holder (tmux: its server) and the client spend
// per MB.
func BenchmarkThroughput(b *testing.B) {
	mark := testproc.Guard(b, 20*time.Minute)
	file, size := catFile(b, 100)
	ctx := context.Background()
	buf := make([]byte, 64<<10)

	var bareCPU time.Duration
	bare := func() time.Duration {
		c0 := selfCPU()
		defer func() { bareCPU += selfCPU() - c0 }()
		start := time.Now()
		cmd := exec.Command("cat", file)
		cmd.Env = testproc.Env(mark)
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for {
			m, err := f.Read(buf)
			n += int64(m)
			if err != nil {
				break
			}
		}
		cmd.Wait()
		f.Close()
		if n < size {
			b.Fatalf("bare read: %d bytes of %d", n, size)
		}
		return time.Since(start)
	}

	tm := openBench(b, mark, 0, 0)
	a, err := tm.Attach(ctx, AttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	var holderCPU, clientCPU time.Duration
	// delivered counts the bytes the client read: less than what cat
	// wrote when the client fell behind and was resynced from the screen.
	var delivered int64
	holder := func(i int) time.Duration {
		marker := []byte(fmt.Sprintf("DONE-%d.\r\n", i))
		h0, c0 := cpuOf(b, tm.HolderPid()), selfCPU()
		start := time.Now()
		a.Write([]byte(fmt.Sprintf("cat %s; printf 'DONE-%%d.\\n' %d\r", file, i)))
		var tail []byte
		for !bytes.Contains(tail, marker) {
			n, err := a.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			delivered += int64(n)
			tail = append(tail, buf[:n]...)
			if len(tail) > 64 {
				tail = tail[len(tail)-64:]
			}
		}
		el := time.Since(start)
		holderCPU += cpuOf(b, tm.HolderPid()) - h0
		clientCPU += selfCPU() - c0
		return el
	}

	var tmux func(i int) time.Duration
	var tmuxCPU time.Duration
	if _, err := exec.LookPath("tmux"); err == nil {
		p := newPane(b, mark, 80, 24, progEnv(mark), "/bin/sh")
		p.screen()
		server, _ := strconv.Atoi(strings.TrimSpace(p.Run("display", "-p", "-t", "s", "#{pid}")))
		cmd := p.Command("attach", "-t", "s")
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait(); f.Close() }()
		readUntil(b, f, "$ ")
		tmux = func(i int) time.Duration {
			s0 := cpuOf(b, server)
			start := time.Now()
			f.Write([]byte(fmt.Sprintf("cat %s; printf 'DONE-%%d.\\n' %d\r", file, i)))
			readUntil(b, f, fmt.Sprintf("DONE-%d.", i))
			el := time.Since(start)
			tmuxCPU += cpuOf(b, server) - s0
			return el
		}
	}

	var tBare, tHolder, tTmux time.Duration
	b.ResetTimer()
	for i := range b.N {
		tBare += bare()
		tHolder += holder(i)
		if tmux != nil {
			tTmux += tmux(i)
		}
	}
	b.StopTimer()
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	perMB := func(d time.Duration) float64 {
		return float64(d.Microseconds()) / 1000 / (float64(size) * float64(b.N) / 1e6)
	}
	b.ReportMetric(float64(size)/1e6, "MB/cat")
	b.ReportMetric(mbs(tBare), "bare-MB/s")
	b.ReportMetric(perMB(bareCPU), "bare-reader-cpu-ms/MB")
	b.ReportMetric(mbs(tHolder), "holder-MB/s")
	b.ReportMetric(mbs(tHolder)/mbs(tBare), "holder/bare")
	b.ReportMetric(perMB(holderCPU), "holder-cpu-ms/MB")
	b.ReportMetric(perMB(clientCPU), "client-cpu-ms/MB")
	b.ReportMetric(float64(a.Resyncs()), "resyncs")
	b.ReportMetric(float64(delivered)/tHolder.Seconds()/1e6, "holder-delivered-MB/s")
	if tmux != nil {
		b.ReportMetric(mbs(tTmux), "tmux-MB/s")
		b.ReportMetric(mbs(tHolder)/mbs(tTmux), "holder/tmux")
		b.ReportMetric(perMB(tmuxCPU), "tmux-server-cpu-ms/MB")
	}
}

// BenchmarkKeystrokeEcho is the round trip of one keystroke to a program
// that echoes it (cat in raw mode, as an editor echoes what is typed):
// from the client's write to the echo read back, attached to a terminal
// session, through tmux (typed into an attached tmux client's terminal,
// read from it), and on a bare creack/pty, each in its own sub-benchmark.
func BenchmarkKeystrokeEcho(b *testing.B) {
	mark := testproc.Guard(b, 5*time.Minute)
	echo := []string{"/bin/sh", "-c", "stty raw -echo; echo ready; exec cat"}
	type rw interface {
		Read([]byte) (int, error)
		Write([]byte) (int, error)
	}
	// loop types a letter and reads until its echo arrives, b.N times.
	loop := func(b *testing.B, f rw) {
		buf := make([]byte, 4096)
		b.ResetTimer()
		for i := range b.N {
			key := byte('a' + i%26)
			if _, err := f.Write([]byte{key}); err != nil {
				b.Fatal(err)
			}
			for seen := false; !seen; {
				n, err := f.Read(buf)
				if err != nil {
					b.Fatal(err)
				}
				seen = bytes.IndexByte(buf[:n], key) >= 0
			}
		}
	}
	waitReady := func(b *testing.B, f rw) {
		var got []byte
		buf := make([]byte, 4096)
		for !bytes.Contains(got, []byte("ready")) {
			n, err := f.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got = append(got, buf[:n]...)
		}
	}
	b.Run("bare-pty", func(b *testing.B) {
		cmd := exec.Command(echo[0], echo[1:]...)
		cmd.Env = progEnv(mark)
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait(); f.Close() }()
		waitReady(b, f)
		loop(b, f)
	})
	b.Run("holder", func(b *testing.B) {
		dir := filepath.Join(testproc.TempDir(b), "sess")
		tm, err := Open(context.Background(), dir, Config{Path: echo[0], Args: echo, Env: progEnv(mark),
			Holder: []string{os.Args[0]}, HolderEnv: append(testproc.Env(mark), holderEnv+"=1")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tm.Close(context.Background()) })
		if _, err := tm.Wait(context.Background(), WaitOptions{Text: "ready", Timeout: 10 * time.Second}); err != nil {
			b.Fatal(err)
		}
		a, err := tm.Attach(context.Background(), AttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		waitReady(b, a) // the redraw shows it
		loop(b, a)
	})
	b.Run("tmux", func(b *testing.B) {
		p := newPane(b, mark, 80, 24, progEnv(mark), echo...)
		cmd := p.Command("attach", "-t", "s")
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait(); f.Close() }()
		waitReady(b, f)
		loop(b, f)
	})
}
