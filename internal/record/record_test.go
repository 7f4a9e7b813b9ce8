package record

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

func TestWriteListRemove(t *testing.T) {
	s := Store{Dir: testproc.TempDir(t)}
	r := &Record{ID: "abc", OwnerPid: 1, Identity: corral.Identity{Isolation: "cgroup", Pid: 5, Pgid: 5, StartTime: 9}, Argv: []string{"sh"}}
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

// TestRecordFormatUnchanged: a record as corrals before the embedded
// corral.Identity wrote it reads back field for field, and one written now
// has the same keys.
func TestRecordFormatUnchanged(t *testing.T) {
	dir := testproc.TempDir(t)
	old := `{"version":1,"id":"abc","owner_pid":7,"owner_start":11,"boot_id":"b-1",` +
		`"isolation":"cgroup","pid":5,"pgid":5,"start_time":9,"cgroup":"/sys/fs/cgroup/corral/t-abc",` +
		`"marker":"CORRAL_TREE=abc","argv":["sh"],"created":"2026-01-02T03:04:05Z"}`
	if err := os.WriteFile(filepath.Join(dir, "abc.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := Store{Dir: dir}
	recs, errs := s.List()
	if len(errs) > 0 || len(recs) != 1 {
		t.Fatalf("list: %v %v", recs, errs)
	}
	want := corral.Identity{Isolation: corral.IsolationCgroup, Pid: 5, Pgid: 5, StartTime: 9,
		Cgroup: "/sys/fs/cgroup/corral/t-abc", BootID: "b-1", Marker: "CORRAL_TREE=abc"}
	if r := recs[0]; r.Identity != want || r.OwnerPid != 7 || r.OwnerStart != 11 || len(r.Argv) != 1 {
		t.Fatalf("read %+v, want identity %+v", r, want)
	}
	if err := s.Write(recs[0]); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "abc.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got, was map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal([]byte(old), &was)
	for k := range was {
		if _, ok := got[k]; !ok {
			t.Errorf("key %q no longer written: %s", k, b)
		}
	}
	for k := range got {
		if _, ok := was[k]; !ok {
			t.Errorf("new key %q written: %s", k, b)
		}
	}
}

// TestBadRecordsOfAnEarlierBootAreRemoved: records are not fsynced, so a
// power loss can leave a torn one (empty, or cut short). Such a file, and
// any unreadable record last changed before this boot, names no live tree:
// List does not report it and Reap removes it. An unreadable record of this
// boot (a newer corral's, say) is still reported and kept.
func TestBadRecordsOfAnEarlierBootAreRemoved(t *testing.T) {
	if bootTime().IsZero() {
		t.Skip("boot time unknown on this system: nothing is taken for an earlier boot's")
	}
	s := Store{Dir: testproc.TempDir(t)}
	before := bootTime().Add(-time.Hour)
	for name, body := range map[string]string{"empty.json": "", "torn.json": `{"version":1,"id":"to`, "future.json": `{"version":99,"id":"future"}`} {
		p := filepath.Join(s.Dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		os.Chtimes(p, before, before)
	}
	now := filepath.Join(s.Dir, "now.json")
	os.WriteFile(now, []byte(`{"version":99,"id":"now"}`), 0o600)
	good := &Record{ID: "good", OwnerPid: 1, Identity: corral.Identity{Isolation: "cgroup", Pid: 5, Pgid: 5, StartTime: 9, BootID: "an-earlier-boot"}}
	if err := s.Write(good); err != nil {
		t.Fatal(err)
	}
	recs, errs := s.List()
	if len(recs) != 1 || len(errs) != 1 || !errors.Is(errs[0], ErrBadRecord) {
		t.Fatalf("want the good record and one error (now.json), got %+v %v", recs, errs)
	}
	_, errs = Reap(s, false)
	if len(errs) != 1 {
		t.Fatalf("reap errors %v", errs)
	}
	left, _ := filepath.Glob(filepath.Join(s.Dir, "*"))
	if len(left) != 1 || left[0] != now {
		t.Fatalf("left after reap: %v (want only %s)", left, now)
	}
}

// TestRecordArgvBytes: a record names its command exactly, words that are
// not UTF-8 included (argv_bytes), and stays readable text: before, they
// were written replaced with U+FFFD, and reap showed a command that never
// ran. A record of a UTF-8 command is written as before (no argv_bytes).
func TestRecordArgvBytes(t *testing.T) {
	s := Store{Dir: testproc.TempDir(t)}
	argv := []string{"printf", "caf\xe9", "é", "\xff\xfe"}
	r := &Record{ID: "abc", Argv: argv, Identity: corral.Identity{Pid: 5, Marker: "CORRAL_TREE=abc"}}
	if err := s.Write(r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(s.Dir, "abc.json"))
	if !utf8.Valid(b) || !strings.Contains(string(b), `"argv_bytes"`) || !strings.Contains(string(b), `"caf\ufffd"`) {
		t.Errorf("record: %s", b)
	}
	recs, errs := s.List()
	if len(errs) > 0 || len(recs) != 1 || strings.Join(recs[0].Argv, "|") != strings.Join(argv, "|") || recs[0].Pid != 5 {
		t.Fatalf("read back %+v %v", recs, errs)
	}
	// Reap's JSON report carries the words exactly too.
	out, _ := json.Marshal(Reaped{Record: recs[0], Action: Gone})
	var back Reaped
	if err := json.Unmarshal(out, &back); err != nil || strings.Join(back.Record.Argv, "|") != strings.Join(argv, "|") {
		t.Errorf("reap report %s: %v", out, err)
	}
	r.Argv = []string{"sh", "-c", "echo é"}
	s.Write(r)
	if b, _ := os.ReadFile(filepath.Join(s.Dir, "abc.json")); strings.Contains(string(b), "argv_bytes") {
		t.Errorf("a UTF-8 record got argv_bytes: %s", b)
	}
	os.WriteFile(filepath.Join(s.Dir, "abc.json"), []byte(`{"version":1,"id":"abc","argv":["a"],"argv_bytes":{"3":"/w=="}}`), 0o600)
	if _, errs := s.List(); len(errs) != 1 || !errors.Is(errs[0], ErrBadRecord) || !strings.Contains(errs[0].Error(), "argv_bytes names word 3 of 1") {
		t.Errorf("argv_bytes past argv: %v", errs)
	}
}
