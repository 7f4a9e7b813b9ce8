//go:build linux

package session

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCommandCannotReadItsNonce: what a command can list or read without
// going into the shell's memory or channel (its stdin's name, the FIFO
// directory, the shell's argv and environment, its own) must not reveal
// the nonce that ends it, or it could forge its completion.
func TestCommandCannotReadItsNonce(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		var nonces []string
		testHookNonce = func(n string) { nonces = append(nonces, n) }
		defer func() { testHookNonce = nil }()
		code := `ls -a '` + s.dir + `'; readlink /proc/self/fd/0; ls -l /proc/$$/fd/ /proc/self/fd/; ` +
			`tr '\0' ' ' </proc/$$/cmdline; tr '\0' '\n' </proc/$$/environ; env; cat >/dev/null`
		out, errs, r, err := run(t, s, code, Options{Stdin: strings.NewReader("input\n")})
		if err != nil {
			t.Fatalf("%+v %v %q", r, err, errs)
		}
		n := nonces[len(nonces)-1]
		if strings.Contains(out, n) || strings.Contains(errs, n) {
			t.Fatalf("the command saw its nonce %s:\n%s\n%s", n, out, errs)
		}
		if !strings.Contains(out, "in-") {
			t.Fatalf("the stdin FIFO is not where the test looks: %s", out)
		}
	})
}

// TestStatusCarriesAcrossCalls: $? at the start of a command is the
// previous command's exit status, as on the next line of a script, without
// an ERR trap seeing anything more.
func TestStatusCarriesAcrossCalls(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		for _, st := range []string{"false", "(exit 7)", "true"} {
			run(t, s, st)
			want := map[string]string{"false": "1\n", "(exit 7)": "7\n", "true": "0\n"}[st]
			if got := mustRun(t, s, `echo $?`); got != want {
				t.Fatalf("after %s, $? is %q, want %q", st, got, want)
			}
		}
		// With stdin given, too.
		run(t, s, "(exit 5)", Options{Stdin: strings.NewReader("")})
		if got, _, _, _ := run(t, s, `echo $?`, Options{Stdin: strings.NewReader("")}); got != "5\n" {
			t.Fatalf("with stdin, $? is %q, want 5", got)
		}
		// A snapshot of the session's state in between keeps it.
		run(t, s, "(exit 6)")
		if _, err := s.Snapshot(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := mustRun(t, s, `echo $?`); got != "6\n" {
			t.Fatalf("after a snapshot, $? is %q, want 6", got)
		}
		// The shell that returned the status is the same one.
		pid := mustRun(t, s, "echo $$")
		run(t, s, "false")
		if got := mustRun(t, s, `echo "$? $$"`); got != "1 "+pid {
			t.Fatalf("after false: %q, want 1 %s", got, pid)
		}
		if shellName(s) == "bash" {
			// An ERR trap fires for false and for the eval that
			// returns its status (a known difference), not for
			// corral's call that hands the status on.
			log := t.TempDir() + "/err"
			mustRun(t, s, `trap 'echo ERR >>`+log+`' ERR`)
			run(t, s, "false")
			mustRun(t, s, "trap - ERR")
			if b, _ := os.ReadFile(log); string(b) != "ERR\nERR\n" {
				t.Fatalf("the ERR trap fired %q", b)
			}
		}
	})
}

// bashCFd is what exec {fd}>/dev/null gives in bash -c with no
// descriptor above 2 open.
func bashCFd(t *testing.T, sh string) string {
	// Without the descriptors this process inherited (a CI runner's),
	// which bash -c would inherit too and the session's shell does not.
	closeInherited := ""
	for _, fd := range inheritedFds() {
		closeInherited += "exec " + fd + ">&-; "
	}
	c := exec.Command(sh, "-c", closeInherited+`exec 9>/dev/null; exec 9>&-; exec {fd}>/dev/null 2>/dev/null && echo $fd`)
	b, err := c.Output()
	if err != nil {
		return "" // dash has no {fd}
	}
	return string(b)
}

// TestDescriptorsAsInBashC: descriptors 3 to 9 and the ones bash would
// hand a script (10 up, {fd}) are the command's, as in bash -c: corral's
// own redirections and channels do not take them, and what a command opens
// with exec stays open for the next, as on a script's next line.
func TestDescriptorsAsInBashC(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		for _, stdin := range []bool{false, true} {
			o := Options{}
			if stdin {
				o.Stdin = strings.NewReader("")
			}
			fds := []string{"3", "9", "10", "11"}
			if shellName(s) != "bash" {
				fds = fds[:2] // dash's redirections take one digit
			}
			for _, fd := range fds {
				out, errs, r, err := run(t, s, "exec "+fd+">&1; echo x"+fd+" >&"+fd+"; exec "+fd+">&-", o)
				if out != "x"+fd+"\n" || err != nil {
					t.Fatalf("stdin %v: fd %s: %q %q %+v %v", stdin, fd, out, errs, r, err)
				}
			}
			// A command's child has what sh -c's child has (this test's
			// own inherited descriptors included).
			fdsOf := `ls /proc/self/fd | tr '\n' ' '`
			b, _ := exec.Command("sh", "-c", fdsOf).Output()
			want := string(b)
			// The marker descriptors, and a held bash's channel, which
			// no shell can make close-on-exec (shell_unix.go,
			// heldChannelFd).
			extra := fmt.Sprintf("%d %d ", markOutFd, markErrFd)
			if shellName(s) == "bash" && s.cfg.HoldDir != "" {
				extra += heldChannelFd + " "
			}
			want = strings.Replace(want, "2 ", "2 "+extra, 1)
			out, _, _, _ := run(t, s, fdsOf, o)
			// Descriptors this test process inherited without
			// close-on-exec (a CI runner's, say) reach sh -c's child but
			// may or may not reach the session's shell, started earlier:
			// they are neither's, so they are left out of both sides.
			out, want = withoutInherited(t, out), withoutInherited(t, want)
			if out != want {
				t.Fatalf("stdin %v: a command's child has descriptors %q, sh -c's %q", stdin, out, want)
			}
			if want := bashCFd(t, shellName(s)); want != "" {
				if got := mustRun(t, s, `exec {fd}>/dev/null; echo $fd; exec {fd}>&-`); got != want {
					t.Fatalf("stdin %v: {fd} gives %q, bash -c %q", stdin, got, want)
				}
			}
		}
		// What exec opens stays open for the next command. A copy of
		// the last command's stdout is that command's own FIFO, whose
		// later output is background output (cmdpipe_unix.go).
		mustRun(t, s, "exec 4>&1")
		if out := mustRun(t, s, "echo kept >&4"); out != "" {
			t.Fatalf("fd 4 opened by the last command: %q", out)
		}
		if bg := waitBackground(t, s, "kept\n", ""); bg.Dropped != 0 {
			t.Fatalf("background output: %+v", bg)
		}
		mustRun(t, s, "exec 4>&-")
		if got := mustRun(t, s, "echo ok"); got != "ok\n" {
			t.Fatalf("session after: %q", got)
		}
	})
}

// TestShlvlSameAfterReset: a fresh shell after a reset has the SHLVL the
// first one had (bash adds one to what it is given; the restored
// environment is the last shell's, which already had it added).
func TestShlvlSameAfterReset(t *testing.T) {
	shellConfigs(t, 60*time.Second, Config{TrackEnv: true, RestoreOnReset: true}, func(t *testing.T, cfg Config, mark string) {
		s := newSession(t, cfg, mark)
		first := mustRun(t, s, `echo "${SHLVL-unset}"`)
		for i := 0; i < 2; i++ {
			runBounded(t, s, "exit 3")
			if got := mustRun(t, s, `echo "${SHLVL-unset}"`); got != first {
				t.Fatalf("SHLVL %q after reset %d, %q at first", got, i+1, first)
			}
		}
	})
}

// TestStdinPastAFunctionNamedExec: a function named exec does not take
// the exec that gives a command its stdin (bash lets a function shadow a
// special builtin; dash does not).
func TestStdinPastAFunctionNamedExec(t *testing.T) {
	shellsAndHeld(t, func(t *testing.T, s *Session, mark string) {
		run(t, s, `exec() { echo "MINE $*"; }`)
		out, errs, r, err := run(t, s, "cat", Options{Stdin: strings.NewReader("fed\n"), Timeout: 5 * time.Second})
		if out != "fed\n" || err != nil {
			t.Fatalf("%q %q %+v %v", out, errs, r, err)
		}
		if out := mustRun(t, s, "echo next; unset -f exec 2>/dev/null; true"); out != "next\n" {
			t.Fatalf("the command after: %q", out)
		}
	})
}

// withoutInherited returns the descriptor list fds (as ls prints it) in
// numeric order without inheritedFds.
func withoutInherited(t *testing.T, fds string) string {
	t.Helper()
	skip := map[string]bool{}
	for _, fd := range inheritedFds() {
		skip[fd] = true
	}
	var keep []int
	for _, f := range strings.Fields(fds) {
		if n, err := strconv.Atoi(f); err == nil && !skip[f] {
			keep = append(keep, n)
		}
	}
	sort.Ints(keep)
	return fmt.Sprint(keep)
}

// inheritedFds lists the descriptors above 2 that this process holds open
// without close-on-exec: those it inherited (Go marks its own), which
// every child it starts gets as well.
func inheritedFds() []string {
	var fds []string
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
				if n, _ := strconv.Atoi(e.Name()); err == nil && n > 2 && flags&syscall.O_CLOEXEC == 0 {
					fds = append(fds, e.Name())
				}
			}
		}
	}
	return fds
}
