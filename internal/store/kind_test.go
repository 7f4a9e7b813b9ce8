package store

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestTerminalRecords: a terminal session's kind, command, size and
// program survive a reopen; a record written without a kind is an exec
// session's.
func TestTerminalRecords(t *testing.T) {
	path := filepath.Join(testproc.TempDir(t), "corral.db") // (t.TempDir fails its cleanup under Wine)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	prog := &corral.Identity{Isolation: "pgroup", Pid: 42, Pgid: 42, StartTime: 7, BootID: "b"}
	if err := s.Put(&Session{Name: "t", Created: now, Cwd: "/tmp", Env: []string{"A=1"}, State: Up, Kind: KindTerminal,
		Term: &Term{Command: []string{"vim", "notes"}, Cols: 100, Rows: 30, SizePolicy: "smallest", Program: prog}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(&Session{Name: "e", Created: now, Shell: "/bin/sh", State: Down}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Get("t")
	if err != nil {
		t.Fatal(err)
	}
	if KindOf(got) != KindTerminal || got.Term == nil || !reflect.DeepEqual(got.Term.Command, []string{"vim", "notes"}) ||
		got.Term.Cols != 100 || got.Term.Rows != 30 || got.Term.SizePolicy != "smallest" || got.Term.Program == nil ||
		*got.Term.Program != *prog || got.Cwd != "/tmp" || !reflect.DeepEqual(got.Env, []string{"A=1"}) {
		t.Fatalf("terminal record read back as %+v (term %+v)", got, got.Term)
	}
	e, err := s.Get("e")
	if err != nil {
		t.Fatal(err)
	}
	if KindOf(e) != KindExec || e.Term != nil {
		t.Fatalf("a record without a kind reads as %q %+v", KindOf(e), e.Term)
	}
}
