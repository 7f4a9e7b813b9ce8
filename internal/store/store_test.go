package store

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// The test binary doubles as a writer that the crash test kills.
func TestMain(m *testing.M) {
	if path := os.Getenv("CORRAL_STORE_WRITER"); path != "" {
		s, err := Open(path)
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(1)
		}
		env := make([]string, 200)
		for i := range env {
			env[i] = fmt.Sprintf("VAR%d=%s", i, strings.Repeat("v", 100))
		}
		for i := 0; ; i++ {
			rec := &Session{Name: fmt.Sprintf("s%d", i%50), Cwd: fmt.Sprintf("/gen/%d", i), Env: env, State: Up}
			if err := s.Put(rec); err != nil {
				fmt.Println("put:", err)
				os.Exit(1)
			}
			fmt.Printf("committed %d\n", i)
		}
	}
	os.Exit(m.Run())
}

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(testproc.TempDir(t), "corral.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestPutGetUpdateDeleteList(t *testing.T) {
	s, _ := openTemp(t)
	now := time.Now().UTC().Round(time.Second)
	for _, n := range []string{"b", "a", "c.2_x-y"} {
		if err := s.Put(&Session{Name: n, Created: now, Shell: "/bin/bash", Cwd: "/", State: Down}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get("a")
	if err != nil || got.Shell != "/bin/bash" || !got.Created.Equal(now) {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := s.Update("a", func(r *Session) error {
		r.Cwd, r.State = "/tmp", Up
		r.Tree = &Shell{Identity: corral.Identity{Pid: 42, StartTime: 7, BootID: "b"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get("a"); got.Cwd != "/tmp" || got.State != Up || got.Tree.Pid != 42 {
		t.Fatalf("after update: %+v", got)
	}
	if err := s.Update("a", func(r *Session) error { r.Env = []string{"X=1", "Y="}; return nil }); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil || len(list) != 3 || list[0].Name != "a" || list[2].Name != "c.2_x-y" || list[0].Env != nil {
		t.Fatalf("list %v %v", list, err)
	}
	all, err := s.All()
	if err != nil || len(all) != 3 || len(all[0].Env) != 2 || all[0].Env[0] != "X=1" || all[0].Cwd != "/tmp" {
		t.Fatalf("all %+v %v", all, err)
	}
	if n, err := s.Count(); n != 3 || err != nil {
		t.Fatalf("count %d %v", n, err)
	}
	if err := s.Delete("b"); err != nil {
		t.Fatal(err)
	}
	s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(envBucket).Get([]byte("b")) != nil {
			t.Error("a deleted session's environment is left")
		}
		return nil
	})
	for _, op := range []error{s.Delete("b"), s.Update("b", func(*Session) error { return nil }), func() error { _, err := s.Get("b"); return err }()} {
		if !errors.Is(op, ErrNotFound) {
			t.Fatalf("missing session: %v", op)
		}
	}
	boom := errors.New("boom")
	if err := s.Update("a", func(r *Session) error { r.Cwd = "/lost"; return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got, _ := s.Get("a"); got.Cwd != "/tmp" {
		t.Fatal("a failed update was written")
	}
}

func TestNames(t *testing.T) {
	for _, good := range []string{"a", "A9", "build.1", "x_y-z", strings.Repeat("n", 64)} {
		if err := CheckName(good); err != nil {
			t.Errorf("%q refused: %v", good, err)
		}
	}
	s, _ := openTemp(t)
	for _, bad := range []string{"", "-x", ".hidden", "_x", "a/b", "a b", "ü", strings.Repeat("n", 65), "a\n", "../x"} {
		if err := CheckName(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("%q accepted", bad)
		}
		if err := s.Put(&Session{Name: bad}); !errors.Is(err, ErrBadName) {
			t.Errorf("%q stored: %v", bad, err)
		}
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("bad names were stored: %v", list)
	}
}

func TestMigrationsAndVersions(t *testing.T) {
	dir := testproc.TempDir(t)
	// A version-0 database: what existed before the schema had a version.
	old := filepath.Join(dir, "old.db")
	db, err := bolt.Open(old, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(old)
	if err != nil {
		t.Fatalf("migrating from 0: %v", err)
	}
	if err := s.Put(&Session{Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("kept"); err != nil {
		t.Fatalf("record lost on reopen: %v", err)
	}
	s.Close()
	// A version-1 database, environments in line: they move to their own
	// bucket, and nothing else of the record changes.
	v1 := filepath.Join(dir, "v1.db")
	db, err = bolt.Open(v1, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		m, _ := tx.CreateBucketIfNotExists(metaBucket)
		m.Put(versionKey, []byte("1"))
		b, _ := tx.CreateBucketIfNotExists(sessionsBucket)
		return b.Put([]byte("old"), []byte(`{"name":"old","shell":"/bin/dash","cwd":"/srv","env":["A=1","B=two words"],"state":"up","keeper":{"pid":9,"start_time":3,"boot_id":"x"}}`))
	})
	db.Close()
	if s, err = Open(v1); err != nil {
		t.Fatalf("migrating from 1: %v", err)
	}
	got, err := s.Get("old")
	if err != nil || got.Shell != "/bin/dash" || got.Cwd != "/srv" || len(got.Env) != 2 || got.Env[1] != "B=two words" || got.Tree.Pid != 9 {
		t.Fatalf("after migration: %+v %v", got, err)
	}
	s.db.View(func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(metaBucket).Get(versionKey)); v != strconv.Itoa(Version) {
			t.Errorf("version %q after migration", v)
		}
		if raw := tx.Bucket(sessionsBucket).Get([]byte("old")); strings.Contains(string(raw), "A=1") {
			t.Errorf("environment still in the record: %s", raw)
		}
		return nil
	})
	s.Close()
	// A database from a newer corral is refused, and left as it was.
	newer := filepath.Join(dir, "newer.db")
	db, _ = bolt.Open(newer, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucketIfNotExists(metaBucket)
		return b.Put(versionKey, []byte(strconv.Itoa(Version+1)))
	})
	db.Close()
	_, err = Open(newer)
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d, this corral reads up to %d", Version+1, Version)) {
		t.Fatalf("newer schema: %v", err)
	}
	db, _ = bolt.Open(newer, 0o600, nil)
	db.View(func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(metaBucket).Get(versionKey)); v != strconv.Itoa(Version+1) {
			t.Errorf("a refused newer database was changed: version %q", v)
		}
		if tx.Bucket(sessionsBucket) != nil {
			t.Error("a refused newer database got buckets")
		}
		return nil
	})
	db.Close()
}

// TestMigrationFromV2 builds a database as a version-2 corral wrote it
// (byte for byte: "keeper" records, one of a held shell with its FIFOs,
// one of an older keeper process with its socket, one down with none, and
// a key this build does not know), opens it with this build and checks
// that every field survives under its version-3 name, the environments
// untouched, and that a second open changes nothing.
func TestMigrationFromV2(t *testing.T) {
	path := filepath.Join(testproc.TempDir(t), "v2.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string]string{
		"held": `{"name":"held","created":"2026-11-30T10:00:00Z","last_used":"2026-11-30T11:00:00Z","shell":"/bin/bash","cwd":"/srv/app","state":"up",` +
			`"keeper":{"pid":4242,"start_time":987654,"boot_id":"b-1","isolation":"cgroup","pgid":4242,"cgroup":"/sys/fs/cgroup/corral/t1","marker":"CORRAL_TREE=abc",` +
			`"fifos":{"ctl":{"dev":1,"ino":2},"out":{"dev":1,"ino":3},"err":{"dev":1,"ino":4}}}}`,
		"legacy": `{"name":"legacy","created":"2026-11-29T10:00:00Z","last_used":"2026-11-29T10:00:00Z","shell":"/bin/sh","cwd":"/","state":"broken","reason":"could not stop",` +
			`"keeper":{"pid":77,"start_time":5,"boot_id":"b-0","isolation":"pgroup","pgid":77,"marker":"CORRAL_TREE=old","socket":"/run/corral/keepers/legacy.sock"},"future_key":[1,2]}`,
		"down": `{"name":"down","created":"2026-11-28T10:00:00Z","last_used":"2026-11-28T12:00:00Z","shell":"/bin/dash","cwd":"/tmp","state":"down"}`,
	}
	envs := map[string]string{"held": `["A=1","B=two words"]`, "legacy": `[]`, "down": `["PATH=/bin"]`}
	if err := db.Update(func(tx *bolt.Tx) error {
		m, _ := tx.CreateBucket(metaBucket)
		m.Put(versionKey, []byte("2"))
		sb, _ := tx.CreateBucket(sessionsBucket)
		eb, _ := tx.CreateBucket(envBucket)
		for n, r := range recs {
			sb.Put([]byte(n), []byte(r))
			eb.Put([]byte(n), []byte(envs[n]))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	check := func(s *Store) {
		t.Helper()
		held, err := s.Get("held")
		if err != nil {
			t.Fatal(err)
		}
		day := func(d, h int) time.Time { return time.Date(2026, 11, d, h, 0, 0, 0, time.UTC) }
		wantHeld := Session{Name: "held", Created: day(30, 10), LastUsed: day(30, 11), Shell: "/bin/bash", Cwd: "/srv/app",
			Env: []string{"A=1", "B=two words"}, State: Up, Tree: &Shell{
				Identity: corral.Identity{Isolation: corral.IsolationCgroup, Pid: 4242, Pgid: 4242, Cgroup: "/sys/fs/cgroup/corral/t1",
					StartTime: 987654, BootID: "b-1", Marker: "CORRAL_TREE=abc"},
				Fifos: &Fifos{Ctl: FileID{1, 2}, Out: FileID{1, 3}, Err: FileID{1, 4}}}}
		if !sameSession(held, &wantHeld) {
			t.Errorf("held after migration:\n got %s\nwant %s", dump(held), dump(&wantHeld))
		}
		legacy, err := s.Get("legacy")
		if err != nil {
			t.Fatal(err)
		}
		wantLegacy := Session{Name: "legacy", Created: day(29, 10), LastUsed: day(29, 10), Shell: "/bin/sh", Cwd: "/", Env: []string{},
			State: Broken, Reason: "could not stop", Tree: &Shell{
				Identity:     corral.Identity{Isolation: corral.IsolationPgroup, Pid: 77, Pgid: 77, StartTime: 5, BootID: "b-0", Marker: "CORRAL_TREE=old"},
				KeeperSocket: "/run/corral/keepers/legacy.sock"}}
		if !sameSession(legacy, &wantLegacy) {
			t.Errorf("legacy after migration:\n got %s\nwant %s", dump(legacy), dump(&wantLegacy))
		}
		down, err := s.Get("down")
		if err != nil {
			t.Fatal(err)
		}
		wantDown := Session{Name: "down", Created: day(28, 10), LastUsed: day(28, 12), Shell: "/bin/dash", Cwd: "/tmp", Env: []string{"PATH=/bin"}, State: Down}
		if !sameSession(down, &wantDown) {
			t.Errorf("down after migration:\n got %s\nwant %s", dump(down), dump(&wantDown))
		}
		s.db.View(func(tx *bolt.Tx) error {
			if v := string(tx.Bucket(metaBucket).Get(versionKey)); v != strconv.Itoa(Version) {
				t.Errorf("version %q after migration", v)
			}
			for n := range recs {
				raw := string(tx.Bucket(sessionsBucket).Get([]byte(n)))
				if strings.Contains(raw, `"keeper"`) || strings.Contains(raw, `"socket"`) {
					t.Errorf("%s still has keeper names: %s", n, raw)
				}
				var was []string
				json.Unmarshal([]byte(envs[n]), &was)
				if env := string(tx.Bucket(envBucket).Get([]byte(n))); env != nulEnded(was) {
					t.Errorf("%s environment %q, was %s", n, env, envs[n])
				}
			}
			if raw := string(tx.Bucket(sessionsBucket).Get([]byte("legacy"))); !strings.Contains(raw, `"future_key":[1,2]`) {
				t.Errorf("a key this build does not know was lost: %s", raw)
			}
			return nil
		})
	}
	s, err := Open(path)
	if err != nil {
		t.Fatalf("migrating from 2: %v", err)
	}
	check(s)
	s.Close()
	if s, err = Open(path); err != nil { // already at 3: nothing to do
		t.Fatal(err)
	}
	defer s.Close()
	check(s)
}

func sameSession(a, b *Session) bool { return dump(a) == dump(b) }

// dump is s as JSON, its environment (stored apart, json:"-") included.
func dump(s *Session) string {
	b, _ := json.Marshal(struct {
		*Session
		Env []string `json:"env"`
	}{s, s.Env})
	return string(b)
}

// nulEnded is env as schema 4 stores it.
func nulEnded(env []string) string {
	var b strings.Builder
	for _, kv := range env {
		b.WriteString(kv + "\x00")
	}
	return b.String()
}

func TestSecondOpenerIsRefused(t *testing.T) {
	_, path := openTemp(t)
	start := time.Now()
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("refused after %v", el)
	}
	if fi, err := os.Stat(path); runtime.GOOS != "windows" && (err != nil || fi.Mode().Perm() != 0o600) {
		t.Fatalf("mode %v %v (Unix permissions only)", fi.Mode(), err)
	}
}

func TestConcurrentUpdatesLoseNothing(t *testing.T) {
	s, _ := openTemp(t)
	s.Put(&Session{Name: "shared"})
	var wg sync.WaitGroup
	for g := 0; g < 10; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				s.Update("shared", func(r *Session) error {
					r.Env = append(r.Env, fmt.Sprintf("G%d_%d=1", g, i))
					return nil
				})
			}
		}(g)
	}
	wg.Wait()
	if got, _ := s.Get("shared"); len(got.Env) != 100 {
		t.Fatalf("%d of 100 updates kept", len(got.Env))
	}
}

// A writer SIGKILLed in the middle of its commits loses nothing it had
// committed, and leaves no torn record.
func TestCrashMidWriteKeepsEveryCommit(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	path := filepath.Join(testproc.TempDir(t), "corral.db")
	for round := 0; round < 5; round++ {
		c := exec.Command(os.Args[0], "-test.run=NONE")
		c.Env = append(testproc.Env(mark), "CORRAL_STORE_WRITER="+path)
		out, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		last := -1
		lines := bufio.NewScanner(out)
		deadline := time.Now().Add(time.Duration(50+round*40) * time.Millisecond)
		for lines.Scan() {
			if n, err := strconv.Atoi(strings.TrimPrefix(lines.Text(), "committed ")); err == nil {
				last = n
			} else {
				t.Fatalf("writer: %s", lines.Text())
			}
			if time.Now().After(deadline) && last >= 0 {
				break
			}
		}
		c.Process.Kill() // ours: started above
		c.Wait()
		s, err := Open(path)
		if err != nil {
			t.Fatalf("round %d: reopen after crash: %v", round, err)
		}
		list, err := s.List()
		if err != nil {
			t.Fatalf("round %d: a record is torn: %v", round, err)
		}
		// Every session the writer had committed (up to the last one it
		// reported) is there, with at least that generation.
		for i := 0; i <= min(last, 49); i++ {
			rec, err := s.Get(fmt.Sprintf("s%d", i))
			if err != nil || len(rec.Env) != 200 {
				t.Fatalf("round %d: s%d after %d commits: %+v %v", round, i, last+1, rec, err)
			}
		}
		if rec, _ := s.Get(fmt.Sprintf("s%d", last%50)); rec == nil || genOf(rec.Cwd) < last {
			t.Fatalf("round %d: commit %d lost: %+v", round, last, rec)
		}
		if len(list) == 0 {
			t.Fatalf("round %d: empty after %d commits", round, last+1)
		}
		s.Close()
	}
}

func genOf(cwd string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(cwd, "/gen/"))
	return n
}

// TestBytesKeptExactly: a session's cwd and environment are bytes, and a
// record keeps them exactly. Before schema 4 both were JSON strings, and
// encoding/json replaced each byte that is not UTF-8 with U+FFFD: a
// session whose shell was gone (after a reboot) restarted in "/" (the
// replaced cwd did not exist) with its Latin-1 variables changed.
func TestBytesKeptExactly(t *testing.T) {
	s, _ := openTemp(t)
	recs := []*Session{
		{Name: "latin1", Cwd: "/tmp/caf\xe9", Env: []string{"A=caf\xe9", "N\xe9=v", "E=", "U=ünïcode", "B=\xff\xfe\x80"}, State: Down},
		{Name: "empty", Cwd: "/", Env: []string{}, State: Down},
		{Name: "none", Cwd: "/srv", State: Down},
	}
	for _, r := range recs {
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what string, got, want *Session) {
		t.Helper()
		if got.Cwd != want.Cwd || (got.Env == nil) != (want.Env == nil) || strings.Join(got.Env, "\x00") != strings.Join(want.Env, "\x00") || len(got.Env) != len(want.Env) {
			t.Errorf("%s %s: cwd %q env %q (nil %v), want cwd %q env %q (nil %v)", what, want.Name, got.Cwd, got.Env, got.Env == nil, want.Cwd, want.Env, want.Env == nil)
		}
	}
	for _, r := range recs {
		got, err := s.Get(r.Name)
		if err != nil {
			t.Fatal(err)
		}
		same("get", got, r)
	}
	all, err := s.All()
	if err != nil || len(all) != len(recs) {
		t.Fatalf("all: %d %v", len(all), err)
	}
	for _, got := range all {
		for _, r := range recs {
			if r.Name == got.Name {
				same("all", got, r)
			}
		}
	}
	list, _ := s.List()
	for _, got := range list {
		if got.Name == "latin1" && (got.Cwd != "/tmp/caf\xe9" || got.Env != nil) {
			t.Errorf("list: cwd %q env %q", got.Cwd, got.Env)
		}
	}
	// An update keeps what it does not change, exactly.
	if err := s.Update("latin1", func(r *Session) error { r.State = Up; return nil }); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get("latin1")
	same("after update", got, recs[0])
	// The record's JSON is UTF-8 text, readable, with the exact cwd in
	// cwd_bytes; a valid cwd has no cwd_bytes.
	s.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(sessionsBucket).Get([]byte("latin1"))
		if !utf8.Valid(raw) || !strings.Contains(string(raw), `"cwd":"/tmp/caf\ufffd"`) ||
			!strings.Contains(string(raw), `"cwd_bytes":"L3RtcC9jYWbp"`) {
			t.Errorf("record %s", raw)
		}
		if raw := tx.Bucket(sessionsBucket).Get([]byte("none")); strings.Contains(string(raw), "cwd_bytes") {
			t.Errorf("a UTF-8 cwd got cwd_bytes: %s", raw)
		}
		return nil
	})
	// An entry with a NUL cannot be an environment's: refused, and the
	// record is left as it was.
	err = s.Update("empty", func(r *Session) error { r.Env = []string{"X=a\x00b"}; return nil })
	if err == nil || !strings.Contains(err.Error(), `"X" holds a NUL byte`) {
		t.Errorf("an entry with a NUL: %v", err)
	}
	if got, _ := s.Get("empty"); got.Env == nil || len(got.Env) != 0 {
		t.Errorf("after a refused update: %q", got.Env)
	}
}

// TestMigrationFromV3 builds a database as a version-3 corral wrote it
// (environments as JSON arrays, one null, one empty) and checks that
// schema 4 reads each environment as it was, null as none (nil: the
// daemon's environment) and [] as an empty one, and that a torn value is
// reported, not misread.
func TestMigrationFromV3(t *testing.T) {
	path := filepath.Join(testproc.TempDir(t), "v3.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{"a": `["A=1","B=two words","C=\u00e9"]`, "null": `null`, "empty": `[]`}
	want := map[string][]string{"a": {"A=1", "B=two words", "C=é"}, "null": nil, "empty": {}}
	db.Update(func(tx *bolt.Tx) error {
		m, _ := tx.CreateBucket(metaBucket)
		m.Put(versionKey, []byte("3"))
		sb, _ := tx.CreateBucket(sessionsBucket)
		eb, _ := tx.CreateBucket(envBucket)
		for n, e := range envs {
			sb.Put([]byte(n), []byte(`{"name":"`+n+`","cwd":"/x","state":"down"}`))
			eb.Put([]byte(n), []byte(e))
		}
		return nil
	})
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for n, w := range want {
		got, err := s.Get(n)
		if err != nil || (got.Env == nil) != (w == nil) || strings.Join(got.Env, "|") != strings.Join(w, "|") || got.Cwd != "/x" {
			t.Errorf("%s: %+v %v, want env %q", n, got, err, w)
		}
	}
	s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(envBucket).Put([]byte("a"), []byte("A=1\x00B=tor")) })
	if _, err := s.Get("a"); err == nil || !strings.Contains(err.Error(), "not NUL-ended") {
		t.Errorf("a torn environment: %v", err)
	}
	s.Close()
}
