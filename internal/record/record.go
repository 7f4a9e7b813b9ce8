// Package record keeps durable records of the trees corral has started, so
// that a tree whose owner died (a SIGKILLed corral run, a crash, a reboot)
// can be found and killed afterwards, and only that tree.
//
// A record is written before the tree's root runs its first instruction and
// removed after the tree has settled. One file per tree:
//
//	<state>/runs/
//	    <id>.json      one Record, schema Version
//	    .<id>.tmp-*    a write in flight (never read; removed by Reap)
//
// Each write goes to a temporary file that is renamed over the final name,
// so a crash of the writing process leaves either the whole old record, the
// whole new one, or none; never a partial one. Records are not fsynced (see
// writeAtomic): a power loss may leave a torn one, which then predates the
// boot and is removed by Reap.
package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/store"
)

// Version is the schema version of records this build writes and reads.
const Version = 1

// ErrBadRecord marks a record file that cannot be used (malformed, from a
// newer schema). It is reported and left in place, never deleted.
var ErrBadRecord = errors.New("bad record")

// Record is the identity of one tree and of the process that owns it.
// The tree's identity is corral.Identity itself, embedded so that its JSON
// fields sit beside the owner's, as they always have: the file format is
// unchanged, and there is no conversion to get wrong. Its BootID is the
// owner's too (both run under the same boot).
type Record struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// Owner is the process responsible for the tree (a corral run); the
	// tree is an orphan once it is gone.
	OwnerPid   int    `json:"owner_pid"`
	OwnerStart uint64 `json:"owner_start"`

	corral.Identity
	Argv    []string  `json:"argv"`
	Created time.Time `json:"created"`
	// Adopted lists processes the owner held as the tree's only because
	// they were reparented to it (corral.Reparented), as last seen while
	// it ran: once the owner is gone nothing else links them to the tree.
	Adopted []corral.Proc `json:"adopted,omitempty"`
}

// recordJSON is a Record's JSON: Argv as text, and argv_bytes {"I":
// base64} for each word that is not UTF-8 (encoding/json would replace its
// invalid bytes with U+FFFD), so that a record names its command exactly.
// Readers of schema 1 that know no argv_bytes see the text.
type recordJSON struct {
	*plainRecord
	ArgvBytes map[int][]byte `json:"argv_bytes,omitempty"`
}

type plainRecord Record

// MarshalJSON writes r with argv_bytes for words that are not UTF-8.
func (r *Record) MarshalJSON() ([]byte, error) {
	j := recordJSON{plainRecord: (*plainRecord)(r)}
	for i, w := range r.Argv {
		if !utf8.ValidString(w) {
			if j.ArgvBytes == nil {
				j.ArgvBytes = map[int][]byte{}
			}
			j.ArgvBytes[i] = []byte(w)
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a record, each argv_bytes word in place of its text.
func (r *Record) UnmarshalJSON(b []byte) error {
	j := recordJSON{plainRecord: (*plainRecord)(r)}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	for i, w := range j.ArgvBytes {
		if i < 0 || i >= len(r.Argv) {
			return fmt.Errorf("argv_bytes names word %d of %d", i, len(r.Argv))
		}
		r.Argv[i] = string(w)
	}
	return nil
}

// recordOf is the record of the tree id running argv, owned by the calling
// process: the tree is an orphan once this process is gone. Its ID is the
// tree's marker value, unique per tree.
func recordOf(id corral.Identity, argv []string) *Record {
	return &Record{
		ID: strings.TrimPrefix(id.Marker, corral.MarkerEnv+"="), OwnerPid: os.Getpid(), OwnerStart: contain.SelfStart(),
		Identity: id, Argv: argv, Created: time.Now().UTC(),
	}
}

// Tracker keeps the record of one tree this process runs, for as long as
// the tree may need reaping: written by OnStart before the tree's first
// instruction, removed by Done once the tree is known to be gone.
//
// For a pgroup tree it also watches, every adoptPoll, for processes that
// are the tree's only because they were reparented to this process
// (corral.Reparented: a `setsid -f env -i CMD` whose parent exited) and adds
// them to the record, so that Reap can still find them if this process
// dies. One adopted and orphaned again within the same adoptPoll is not
// recorded.
type Tracker struct {
	store Store
	argv  []string
	id    string // set by OnStart

	// mu guards the fields that follow; the watcher goroutine and Done
	// share them.
	mu   sync.Mutex
	rec  *Record
	werr error // the first failed rewrite
	// stop is closed by Done to end the watcher, which closes done when
	// it has returned; both nil without a watcher.
	stop, done chan struct{}
}

// adoptPoll is how often a Tracker looks for adopted processes.
const adoptPoll = 100 * time.Millisecond

// maxAdopted bounds the adopted processes one record lists.
const maxAdopted = 256

// Track returns a Tracker for a tree running argv, recorded in s.
func (s Store) Track(argv []string) *Tracker { return &Tracker{store: s, argv: argv} }

// OnStart writes the tree's record; it is the tree's start hook
// (corral.Cmd.OnStart, session.Config.OnStart), so a failed write runs
// nothing.
func (t *Tracker) OnStart(id corral.Identity) error {
	r := recordOf(id, t.argv)
	t.id = r.ID
	if err := t.store.Write(r); err != nil {
		return err
	}
	if corral.CanAdopt() && r.Isolation == corral.IsolationPgroup {
		t.mu.Lock()
		t.rec = r
		t.mu.Unlock()
		t.stop, t.done = make(chan struct{}), make(chan struct{})
		go t.watch(r.Identity)
	}
	return nil
}

// watch adds the tree's adopted processes to the record until Done.
func (t *Tracker) watch(ident corral.Identity) {
	defer close(t.done)
	tick := time.NewTicker(adoptPoll)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		procs := corral.Reparented(ident)
		t.mu.Lock()
		if fresh(t.rec.Adopted, procs) {
			// Those no longer adopted are gone (or released): keep the
			// live ones, at most maxAdopted.
			r := *t.rec
			r.Adopted = procs[:min(len(procs), maxAdopted)]
			if err := t.store.Write(&r); err != nil {
				if t.werr == nil {
					t.werr = fmt.Errorf("record adopted processes %v: %w", procs, err)
				}
			} else {
				t.rec = &r
			}
		}
		t.mu.Unlock()
	}
}

// fresh reports whether procs holds a process that recorded lacks.
func fresh(recorded, procs []corral.Proc) bool {
	have := map[corral.Proc]bool{}
	for _, p := range recorded {
		have[p] = true
	}
	for _, p := range procs {
		if !have[p] {
			return true
		}
	}
	return false
}

// Done removes the record once the tree has run; res is its result. A tree
// that could not be killed (res.KillFailed) keeps its record, for Reap.
// Nothing is done for a tree that never started. An adopted process that
// could not be added to the record is reported here.
func (t *Tracker) Done(res *corral.Result) error {
	if t.stop != nil {
		close(t.stop)
		<-t.done
		t.stop = nil
	}
	t.mu.Lock()
	werr := t.werr
	t.mu.Unlock()
	if t.id == "" || res.KillFailed {
		return werr
	}
	return errors.Join(werr, t.store.Remove(t.id))
}

// Store is a directory of records.
type Store struct{ Dir string }

func (s Store) path(id string) string { return filepath.Join(s.Dir, id+".json") }

// Write stores r durably, replacing any record with the same id.
func (s Store) Write(r *Record) error {
	if !store.ValidName(r.ID, 128) {
		return fmt.Errorf("record id %q: %w", r.ID, ErrBadRecord)
	}
	r.Version = Version
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(s.Dir, r.ID+".json", b)
}

// writeAtomic writes data to dir/name through a temporary file and a
// rename.
//
// Neither the file nor the directory is fsynced, on purpose: a record's only
// job is to let Reap find a tree whose owner died, and the trees it names
// cannot outlive a reboot. Against the death of the writing process (a
// SIGKILL, a crash of corral) the page cache is durable already: what was
// written and renamed is what any later reader sees. Only a crash of the
// machine can lose or tear an unsynced record, and then every tree it could
// name is gone with that boot: a lost record loses nothing, and a torn one
// predates the boot, which List ignores and Reap removes (staleBad). The
// three fsyncs a run paid (file, directory after the rename and after the
// removal) cost about 0.7 ms of every `corral run` on ext4 here.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+strings.TrimSuffix(name, ".json")+".tmp-*")
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record %s: %w", name, err)
	}
	return nil
}

// Remove deletes the record of id; a missing record is not an error. Like
// a write it is not synced (see writeAtomic): a removal lost to a power
// loss leaves a record of the previous boot, which Reap removes.
func (s Store) Remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// List reads every record. Files that cannot be used are returned as
// errors (wrapping ErrBadRecord) beside the good records, except those
// last changed before this boot (staleBad), which name no live tree and
// are left out.
func (s Store) List() ([]*Record, []error) {
	names, err := filepath.Glob(filepath.Join(s.Dir, "*.json"))
	if err != nil {
		return nil, []error{err}
	}
	sort.Strings(names)
	var recs []*Record
	var errs []error
	for _, n := range names {
		b, err := os.ReadFile(n)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed by its owner meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			continue
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			if !staleBad(n) {
				errs = append(errs, fmt.Errorf("%s: %w: %v", n, ErrBadRecord, err))
			}
			continue
		}
		if r.Version != Version || r.ID+".json" != filepath.Base(n) {
			if !staleBad(n) {
				errs = append(errs, fmt.Errorf("%s: %w: version %d, id %q", n, ErrBadRecord, r.Version, r.ID))
			}
			continue
		}
		recs = append(recs, &r)
	}
	return recs, errs
}
