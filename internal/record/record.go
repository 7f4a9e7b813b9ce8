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
// Each write goes to a temporary file that is fsynced and renamed over the
// final name, and the directory is fsynced, so a crash leaves either the
// whole old record, the whole new one, or none; never a partial one.
package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

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
type Tracker struct {
	store Store
	argv  []string
	id    string // set by OnStart
}

// Track returns a Tracker for a tree running argv, recorded in s.
func (s Store) Track(argv []string) *Tracker { return &Tracker{store: s, argv: argv} }

// OnStart writes the tree's record; it is the tree's start hook
// (corral.Cmd.OnStart, session.Config.OnStart), so a failed write runs
// nothing.
func (t *Tracker) OnStart(id corral.Identity) error {
	r := recordOf(id, t.argv)
	t.id = r.ID
	return t.store.Write(r)
}

// Done removes the record once the tree has run; res is its result. A tree
// that could not be killed (res.KillFailed) keeps its record, for Reap.
// Nothing is done for a tree that never started.
func (t *Tracker) Done(res *corral.Result) error {
	if t.id == "" || res.KillFailed {
		return nil
	}
	return t.store.Remove(t.id)
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

// writeAtomic writes data to dir/name through a synced temporary file and
// a rename, then syncs dir.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+strings.TrimSuffix(name, ".json")+".tmp-*")
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
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
	return syncDir(dir)
}

// Remove deletes the record of id; a missing record is not an error.
func (s Store) Remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("record: %w", err)
	}
	return syncDir(s.Dir)
}

// List reads every record. Files that cannot be used are returned as
// errors (wrapping ErrBadRecord) beside the good records.
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
			errs = append(errs, fmt.Errorf("%s: %w: %v", n, ErrBadRecord, err))
			continue
		}
		if r.Version != Version || r.ID+".json" != filepath.Base(n) {
			errs = append(errs, fmt.Errorf("%s: %w: version %d, id %q", n, ErrBadRecord, r.Version, r.ID))
			continue
		}
		recs = append(recs, &r)
	}
	return recs, errs
}
