package record

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

func TestWriteListRemove(t *testing.T) {
	s := Store{Dir: testproc.TempDir(t)}
	r := &Record{ID: "abc", OwnerPid: 1, Isolation: "cgroup", Pid: 5, Pgid: 5, StartTime: 9, Argv: []string{"sh"}}
	if err := s.Write(r); err != nil {
		t.Fatal(err)
	}
	r.Pid = 6
	if err := s.Write(r); err != nil {
		t.Fatal(err)
	}
	recs, errs := s.List()
	if len(errs) != 0 || len(recs) != 1 || recs[0].Pid != 6 || recs[0].Version != Version {
		t.Fatalf("list %+v %v", recs, errs)
	}
	if tmps, _ := filepath.Glob(filepath.Join(s.Dir, ".*")); len(tmps) != 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
	if err := s.Remove("abc"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("abc"); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	if recs, _ := s.List(); len(recs) != 0 {
		t.Fatalf("record survived removal: %+v", recs)
	}
}

func TestBadRecordsAreReportedNotRead(t *testing.T) {
	s := Store{Dir: testproc.TempDir(t)}
	if err := s.Write(&Record{ID: "../escape"}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("bad id accepted: %v", err)
	}
	os.WriteFile(filepath.Join(s.Dir, "torn.json"), []byte(`{"version":1,"id":"to`), 0o600)
	os.WriteFile(filepath.Join(s.Dir, "future.json"), []byte(`{"version":99,"id":"future"}`), 0o600)
	os.WriteFile(filepath.Join(s.Dir, "renamed.json"), []byte(`{"version":1,"id":"other"}`), 0o600)
	recs, errs := s.List()
	if len(recs) != 0 || len(errs) != 3 {
		t.Fatalf("recs %+v errs %v", recs, errs)
	}
	for _, e := range errs {
		if !errors.Is(e, ErrBadRecord) {
			t.Errorf("%v is not ErrBadRecord", e)
		}
	}
}

func TestStaleTempsRemoved(t *testing.T) {
	s := Store{Dir: testproc.TempDir(t)}
	old := filepath.Join(s.Dir, ".x.tmp-1")
	fresh := filepath.Join(s.Dir, ".y.tmp-2")
	os.WriteFile(old, []byte("{"), 0o600)
	os.WriteFile(fresh, []byte("{"), 0o600)
	past := time.Now().Add(-time.Hour)
	os.Chtimes(old, past, past)
	Reap(s, false)
	if _, err := os.Stat(old); err == nil {
		t.Error("stale temporary file kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a write in flight was removed")
	}
}
