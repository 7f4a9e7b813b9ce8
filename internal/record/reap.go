package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
)

// Action is what Reap did (or, dry, would do) with one record.
type Action string

const (
	// OwnerAlive: the tree's owner is still running; nothing done.
	OwnerAlive Action = "owner_alive"
	// Killed: the owner was gone; the tree's processes were killed and
	// the record removed.
	Killed Action = "killed"
	// WouldKill: dry run of Killed.
	WouldKill Action = "would_kill"
	// Gone: the owner and the whole tree were gone (or recorded under
	// another boot); the record was removed.
	Gone Action = "gone"
	// WouldRemove: dry run of Gone.
	WouldRemove Action = "would_remove"
	// Failed: the tree could not be killed; the record is kept.
	Failed Action = "failed"
)

// Reaped reports what Reap did with one record.
type Reaped struct {
	Record *Record `json:"record"`
	Action Action  `json:"action"`
	Pids   []int   `json:"pids"`
	Error  string  `json:"error,omitempty"`
}

// Reap kills every recorded tree whose owner is gone, through the identity
// gate of corral.FindOrphan, and removes its record. Trees whose owner is alive
// are left alone. With dry set nothing is signalled or removed. Running it
// twice is harmless: the second run finds no records of killed trees.
//
// A record whose root runs but is not proved a tree corral started (not
// in its recorded cgroup; without the tree's marker; a marker corral does
// not make) is refused (Failed, saying why, the record kept), with
// nothing signalled: a forged, swapped or corrupted record names a
// stranger's real pid and start time as easily as a stale one.
//
// What counts as the tree's after its owner died: under cgroup, whatever
// is in its cgroup; under pgroup, the recorded root (pid and start time,
// carrying the tree's marker), a process with the tree's marker, a
// process the owner recorded as adopted (pid and start time), a child of
// a member, and the members of the recorded group only while the
// recorded root, proved so, still holds its pid. A pgroup root that
// cleared its own environment (the command was env -i CMD) cannot be
// proved and is refused. A pgroup process that left the group and
// cleared its environment, whose
// parent is gone (`setsid -f env -i CMD`) and that the owner did not
// record (the owner died within one Tracker poll of the adoption, or ran
// several trees) is indistinguishable from a stranger and is not found.
func Reap(s Store, dry bool) ([]Reaped, []error) {
	recs, errs := s.List()
	var out []Reaped
	for _, r := range recs {
		out = append(out, reapOne(s, r, dry))
	}
	if !dry {
		removeStaleTemps(s.Dir)
	}
	return out, errs
}

func reapOne(s Store, r *Record, dry bool) Reaped {
	res := Reaped{Record: r, Pids: []int{}}
	if contain.ProcessAlive(r.OwnerPid, r.OwnerStart) {
		res.Action = OwnerAlive
		return res
	}
	tree, err := corral.FindOrphan(r.Identity, r.Adopted...)
	if errors.Is(err, corral.ErrGone) {
		return removeRecord(s, res, dry, Gone, WouldRemove)
	}
	if err != nil {
		res.Action, res.Error = Failed, err.Error()
		return res
	}
	pids, err := tree.Members()
	if err != nil {
		res.Action, res.Error = Failed, err.Error()
		return res
	}
	if pids != nil {
		res.Pids = pids
	}
	if dry {
		res.Action = WouldKill
		if len(pids) == 0 {
			res.Action = WouldRemove
		}
		return res
	}
	if err := tree.Kill(); err != nil {
		res.Action, res.Error = Failed, err.Error()
		return res
	}
	act := Killed
	if len(pids) == 0 {
		act = Gone
	}
	return removeRecord(s, res, false, act, act)
}

func removeRecord(s Store, res Reaped, dry bool, act, dryAct Action) Reaped {
	if dry {
		res.Action = dryAct
		return res
	}
	if err := s.Remove(res.Record.ID); err != nil {
		res.Action, res.Error = Failed, fmt.Sprintf("remove record: %v", err)
		return res
	}
	res.Action = act
	return res
}

// removeStaleTemps removes temporary files of writes that a crash
// interrupted (a write in flight is younger than a minute), and records
// that cannot be read and were last changed before this boot (staleBad).
func removeStaleTemps(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	for _, t := range tmps {
		if fi, err := os.Stat(t); err == nil && time.Since(fi.ModTime()) > time.Minute {
			os.Remove(t)
		}
	}
	recs, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, r := range recs {
		if staleBad(r) && !readable(r) {
			os.Remove(r)
		}
	}
}

// staleBad reports whether the file at path was last changed before this
// boot (with a margin for the boot time's rounding): if it cannot be read
// as a record, it is one torn by a power loss (records are not fsynced) or
// written by another corral under an earlier boot; either way it names no
// process alive now. Where the boot time is unknown, nothing is stale.
func staleBad(path string) bool {
	boot := bootTime()
	if boot.IsZero() {
		return false
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular() && fi.ModTime().Before(boot.Add(-bootMargin))
}

// bootMargin is how much earlier than the boot time a file must have been
// changed to count as of an earlier boot.
const bootMargin = 2 * time.Second

// readable reports whether the file at path holds a record this build
// reads.
func readable(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var r Record
	return json.Unmarshal(b, &r) == nil && r.Version == Version && r.ID+".json" == filepath.Base(path)
}
