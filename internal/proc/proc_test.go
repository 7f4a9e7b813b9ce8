//go:build linux

package proc

import (
	"os"
	"os/exec"
	"testing"
)

func TestParseStatOddName(t *testing.T) {
	line := []byte("42 (a) b (c) d) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10\n")
	s, err := parseStat(42, line)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != 'S' || s.Ppid != 1 || s.Pgid != 42 || s.Sid != 42 || s.StartTime != 987654 {
		t.Fatalf("parsed %+v", s)
	}
	if _, err := parseStat(1, []byte("1 (x")); err == nil {
		t.Fatal("malformed stat parsed")
	}
}

func TestSelfAndChild(t *testing.T) {
	self, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.Ppid != os.Getppid() || self.StartTime == 0 {
		t.Fatalf("self stat %+v", self)
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "CORRAL_PROC_TEST=child")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	kids, err := Children(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range kids {
		found = found || k == cmd.Process.Pid
	}
	if !found {
		t.Fatalf("child %d not among children %v", cmd.Process.Pid, kids)
	}
	ok, err := HasEnv(cmd.Process.Pid, "CORRAL_PROC_TEST=child")
	if err != nil || !ok {
		t.Fatalf("HasEnv = %v, %v", ok, err)
	}
	if ok, _ := HasEnv(cmd.Process.Pid, "CORRAL_PROC_TEST=chil"); ok {
		t.Fatal("HasEnv matched a prefix")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := ReadStat(cmd.Process.Pid); err != ErrGone {
		t.Fatalf("reaped child: err = %v, want ErrGone", err)
	}
	id, err := BootID()
	if err != nil || len(id) < 32 {
		t.Fatalf("boot id %q, %v", id, err)
	}
}
