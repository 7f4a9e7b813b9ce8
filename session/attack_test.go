//go:build linux

package session

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/internal/testproc/matrix"
)

// spy is a FIFO that records what anyone writes to it: what a swapped-in
// FIFO's owner would read. Its reader is open (non-blocking) from the
// start, so a writer opening it is not refused for want of one.
type spy struct {
	path string
	r    *os.File
}

func newSpy(t *testing.T, path string) *spy {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &spy{path: path, r: r}
}

// heard returns what was written to the spy so far.
func (s *spy) heard() string {
	b := make([]byte, 1<<16)
	n, _ := syscall.Read(int(s.r.Fd()), b)
	if n < 0 {
		n = 0
	}
	return string(b[:n])
}

// TestAttachRefusesSwappedFifos: between an owner's death and the next
// take-over, another user (or a link, or any FIFO that is not the one made
// for the shell) stands in place of the held shell's FIFOs. Attach refuses
// with ErrNotOurs, sends nothing through them, and leaves the shell alone:
// once the real FIFOs are back, the same shell is taken over and works.
func TestAttachRefusesSwappedFifos(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	u := testproc.NewUser(t)
	cfg, _ := heldConfig(t, "bash", "", mark)
	var fifos Fifos
	var held corral.Identity
	cfg.OnStart = nil // OnHeld is called instead
	cfg.OnHeld = func(id corral.Identity, f Fifos) error { held, fifos = id, f; return nil }
	s1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, s1, "export KEPT=1")
	last := s1.State()
	if last.Fifos != fifos || fifos.Ctl.Ino == 0 {
		t.Fatalf("State.Fifos %+v, OnHeld got %+v", last.Fifos, fifos)
	}
	s1.Detach()
	dir := cfg.HoldDir
	ctl := filepath.Join(dir, ctlName)
	keep := filepath.Join(filepath.Dir(dir), "ctl.real")
	if err := os.Rename(ctl, keep); err != nil {
		t.Fatal(err)
	}
	// Each stand-in for ctl, with a spy on it (its reader is open).
	swaps := []struct {
		name string
		make func() *spy
	}{
		{"another user's FIFO", func() *spy {
			sp := newSpy(t, ctl)
			os.Chown(ctl, u.Uid, u.Gid)
			return sp
		}},
		{"a symbolic link to a FIFO", func() *spy {
			sp := newSpy(t, filepath.Join(filepath.Dir(dir), "elsewhere"))
			os.Symlink(sp.path, ctl)
			return sp
		}},
		{"our own FIFO, but not the shell's", func() *spy { return newSpy(t, ctl) }},
		{"a FIFO others may write to", func() *spy {
			sp := newSpy(t, ctl)
			os.Chmod(ctl, 0o622)
			return sp
		}},
	}
	for _, sw := range swaps {
		sp := sw.make()
		_, err := Attach(cfg, held, last)
		if !errors.Is(err, ErrNotOurs) {
			t.Fatalf("%s: Attach: %v, want ErrNotOurs", sw.name, err)
		}
		if got := sp.heard(); got != "" {
			t.Fatalf("%s: sent through it: %q", sw.name, got)
		}
		if !testproc.Alive(held.Pid) {
			t.Fatalf("%s: the shell was stopped", sw.name)
		}
		os.Remove(ctl)
		os.Remove(sp.path)
	}
	// The other user writes into the session's directory (open to them
	// for a moment, as a careless earlier owner might have left it): the
	// directory is not private, and nothing in it is used.
	sp := newSpy(t, ctl)
	os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o711)
	os.Chmod(dir, 0o777)
	u.Run(t, testproc.Env(mark), "mv "+filepath.Join(dir, outName)+" "+filepath.Join(dir, "out.x")+" && mkfifo -m 600 "+filepath.Join(dir, outName))
	if _, err := Attach(cfg, held, last); !errors.Is(err, ErrNotOurs) || !strings.Contains(err.Error(), "mode 0777") {
		t.Fatalf("a directory others can write in: %v", err)
	}
	os.Chmod(dir, 0o700)
	// The directory is private again, but the other user's out is there.
	os.Remove(ctl)
	os.Rename(keep, ctl)
	if _, err := Attach(cfg, held, last); !errors.Is(err, ErrNotOurs) || !strings.Contains(err.Error(), "belongs to uid") {
		t.Fatalf("another user's out: %v", err)
	}
	if got := sp.heard(); got != "" {
		t.Fatalf("sent: %q", got)
	}
	os.Remove(filepath.Join(dir, outName))
	os.Rename(filepath.Join(dir, "out.x"), filepath.Join(dir, outName))
	// The real FIFOs again: the very same shell, untouched, is taken over.
	s2 := mustAttach(t, cfg, held, last)
	if got := mustRun(t, s2, "echo $KEPT $$"); got != "1 "+strconv.Itoa(held.Pid)+"\n" {
		t.Fatalf("after the real FIFOs came back: %q (shell %d)", got, held.Pid)
	}
}

// TestSessionShellSkipsStartupHooks: a creator's BASH_ENV (one that
// redefines printf and leaves a trace), ENV, SHELLOPTS=noexec or an
// exported printf function neither runs nor wedges the session's shell,
// neither at its first start nor when it is restored after a reset (as a
// record's environment would be). (Before: bash sourced BASH_ENV despite
// --noprofile --norc, and the redefined printf made every start fail.)
func TestSessionShellSkipsStartupHooks(t *testing.T) {
	matrix.Shells(t, func(t *testing.T, sh string) {
		mark := testproc.Guard(t, 60*time.Second)
		dir := t.TempDir()
		trace := filepath.Join(dir, "sourced")
		script := filepath.Join(dir, "hook.sh")
		os.WriteFile(script, []byte("echo $$ >> "+trace+"\nprintf() { :; }\n"), 0o644)
		hold := filepath.Join(t.TempDir(), "held")
		os.Mkdir(hold, 0o700)
		env := append(testproc.Env(mark), "BASH_ENV="+script, "ENV="+script, "SHELLOPTS=noexec:xtrace",
			"BASHOPTS=extdebug", "PS4=$(echo ps4 >> "+trace+")+ ", "BASH_FUNC_printf%%=() { echo >> "+trace+"; }")
		cfg := Config{Shell: sh, Env: env, Dir: dir, HoldDir: hold, TrackEnv: true, RestoreOnReset: true}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := mustRun(t, s, `printf '%s|' ok "${BASH_ENV-unset}" "${ENV-unset}"`); got != "ok|unset|unset|" {
			t.Fatalf("first shell: %q", got)
		}
		// A record restored: the shell's state is put back with the
		// hooks in it, then the shell is reset.
		s.mu.Lock()
		s.state.Env = append(s.state.Env, "BASH_ENV="+script, "ENV="+script, "SHELLOPTS=noexec")
		s.mu.Unlock()
		run(t, s, "sleep 60", Options{Timeout: 100 * time.Millisecond})
		if got := mustRun(t, s, `printf '%s|' again "${BASH_ENV-unset}"`); got != "again|unset|" {
			t.Fatalf("restored shell: %q", got)
		}
		if st := s.State(); st.Resets != 1 {
			t.Fatalf("no reset: %+v", st)
		}
		if b, err := os.ReadFile(trace); err == nil {
			t.Fatalf("a start-up hook ran: %q", b)
		}
	})
}
