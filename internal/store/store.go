// Package store keeps the daemon's durable records of named sessions in an
// embedded transactional database (bbolt), so that a session's name, shell,
// working directory and environment survive a daemon crash and a reboot.
//
// Every change is one transaction, fsynced on commit: a crash at any point
// leaves each record either as it was or as it was written, never torn. The
// layout (schema version 4):
//
//	meta/
//	    version        "4"
//	sessions/
//	    <name>         a Session without its environment, as JSON; its
//	                   "tree" is the held shell's identity
//	                   (corral.Identity) and FIFOs, its optional
//	                   "limits" the session's resource limits, its
//	                   "cwd_bytes" (base64) the cwd exactly when it is
//	                   not UTF-8 ("cwd" then has U+FFFD for each byte
//	                   that is not)
//	env/
//	    <name>         its environment: each NAME=value followed by a
//	                   NUL byte, as /proc/PID/environ (no key: none
//	                   recorded, the daemon's own)
//
// Environments are kept apart because they are most of a record's bytes
// and a listing needs none of them. They are raw bytes, not JSON, because
// an environment is bytes (a value that is not UTF-8 is common enough:
// a Latin-1 file name), JSON text would have them replaced, and an entry
// cannot hold a NUL. Migrations run in order, in one transaction, when a
// database with an older version is opened: 1 -> 2 moved the environments
// out; 2 -> 3 renamed each record's "keeper" (the name left from when a
// keeper process held each shell) to "tree", and a keeper process's
// "socket" to "keeper_socket"; 3 -> 4 rewrote each environment from a
// JSON array to NUL-ended entries (what a JSON array held is kept; bytes
// that were not UTF-8 had been replaced when it was written). A database
// from a newer corral is refused (ErrNewerSchema) rather than misread.
// Terminal sessions (kind.go) added the optional "kind" and "term" fields
// to schema 3; a record without them is an exec session's, so no
// migration was needed.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"

	"github.com/corral-dev/corral"
)

// Version is the schema version this build reads and writes.
const Version = 4

var (
	// ErrNotFound: no session of that name.
	ErrNotFound = errors.New("no such session")
	// ErrBadName: a session name outside [A-Za-z0-9][A-Za-z0-9._-]{0,63}.
	ErrBadName = errors.New("invalid session name")
	// ErrNewerSchema: the database was written by a newer corral.
	ErrNewerSchema = errors.New("database written by a newer corral")
	// ErrLocked: another process (a running daemon) holds the database.
	ErrLocked = errors.New("database in use by another process")
)

var (
	metaBucket     = []byte("meta")
	sessionsBucket = []byte("sessions")
	envBucket      = []byte("env")
	versionKey     = []byte("version")
)

// CheckName returns an error wrapping ErrBadName unless name is a valid
// session name.
func CheckName(name string) error {
	if !ValidName(name, 64) {
		return fmt.Errorf("%q: %w (want [A-Za-z0-9][A-Za-z0-9._-]{0,63})", name, ErrBadName)
	}
	return nil
}

// ValidName reports whether s matches [A-Za-z0-9][A-Za-z0-9._-]{0,max-1}.
// (Written out: the regular expression with a counted repetition costs
// milliseconds to compile at every start of the binary.)
func ValidName(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// State is what the daemon knows of a session's shell.
type State string

const (
	Up   State = "up"   // its shell is alive and held by the daemon
	Down State = "down" // no shell: the next command starts one, in the saved cwd and environment
	// Broken: what its recorded shell left could not be verified as gone
	// or be stopped (Reason says why); nothing is started for it until
	// that succeeds or the session is killed.
	Broken State = "broken"
)

// Shell is the durable record of a session's shell: the identity of its
// tree (a pid is trusted only together with its start time and boot id,
// and only inside the recorded cgroup or group) and the FIFOs made for it.
type Shell struct {
	corral.Identity
	// Fifos identifies the FIFOs made for the shell, for a take-over to
	// check that they are still those (nil in records written before
	// corral recorded them).
	Fifos *Fifos `json:"fifos,omitempty"`
	// KeeperSocket is set only in records of corrals from before held
	// shells, whose shell was held by a keeper process listening there:
	// such a tree cannot be taken over, only reaped through its identity.
	KeeperSocket string `json:"keeper_socket,omitempty"`
}

// Fifos identifies a held shell's command channel and output FIFOs.
type Fifos struct {
	Ctl FileID `json:"ctl"`
	Out FileID `json:"out"`
	Err FileID `json:"err"`
}

// FileID is a file's device and inode numbers.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Session is the durable record of one named session.
type Session struct {
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	LastUsed time.Time `json:"last_used"`
	Shell    string    `json:"shell"`
	// Cwd and Env are as of the last completed command, exactly (bytes
	// that are not UTF-8 included). (Env is stored apart: List leaves it
	// nil.)
	Cwd   string   `json:"cwd"`
	Env   []string `json:"-"`
	State State    `json:"state"`
	// Tree is the session's shell tree while one is recorded (up, or
	// broken with its identity kept for another attempt); nil when down.
	Tree *Shell `json:"tree,omitempty"`
	// Reason says why the session is broken.
	Reason string `json:"reason,omitempty"`
	// Limits are the resource limits of the session's tree, given to
	// every shell it starts (nil: none). An optional field of schema 3:
	// records without it have no limits, so no migration is needed.
	Limits *corral.Limits `json:"limits,omitempty"`
	// Kind is what the session is: KindExec ("" in records written
	// before terminal sessions) or KindTerminal, whose Term says what it
	// runs (see kind.go). Optional fields of schema 3, as Limits.
	Kind Kind  `json:"kind,omitempty"`
	Term *Term `json:"term,omitempty"`
	// Umask is the umask every shell of the session starts with, its
	// creating client's (nil: the daemon's). Optional, as Limits.
	Umask *uint32 `json:"umask,omitempty"`
}

// Store is an open database. Its methods are safe for concurrent use.
type Store struct{ db *bolt.DB }

// migrations[v] upgrades a database at version v to v+1.
var migrations = []func(tx *bolt.Tx) error{
	// 0 -> 1: an empty database gets its buckets.
	func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(sessionsBucket)
		return err
	},
	// 1 -> 2: environments move to a bucket of their own.
	moveEnvs,
	// 2 -> 3: "keeper" becomes "tree", its "socket" "keeper_socket".
	renameKeeper,
	// 3 -> 4: environments become NUL-ended entries.
	rawEnvs,
}

// Migrations work on each record as a JSON object, never through Session:
// Session is the shape of the latest version, and decoding an older
// record into it would drop what this build names differently.

// moveEnvs is the migration from version 1 to 2: each record's "env"
// moves to the env bucket, the rest of the record stays as it was.
func moveEnvs(tx *bolt.Tx) error {
	envs, err := tx.CreateBucketIfNotExists(envBucket)
	if err != nil {
		return err
	}
	return rewrite(tx, func(name []byte, rec map[string]json.RawMessage) error {
		env, ok := rec["env"]
		if !ok || string(env) == "null" {
			env = []byte("null")
		}
		delete(rec, "env")
		return envs.Put(name, env)
	})
}

// rewrite applies fn to every record of the sessions bucket, as a JSON
// object, and writes back what fn leaves.
func rewrite(tx *bolt.Tx, fn func(name []byte, rec map[string]json.RawMessage) error) error {
	bk := tx.Bucket(sessionsBucket)
	type kv struct{ k, v []byte }
	var out []kv
	err := bk.ForEach(func(k, v []byte) error {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("session %q: %w", k, err)
		}
		if err := fn(k, rec); err != nil {
			return fmt.Errorf("session %q: %w", k, err)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		out = append(out, kv{append([]byte(nil), k...), b})
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range out {
		if err := bk.Put(r.k, r.v); err != nil {
			return err
		}
	}
	return nil
}

// renameKeeper is the migration from version 2 to 3: in each record, the
// "keeper" object becomes "tree" and a keeper process's "socket" becomes
// "keeper_socket". Every other key, known to this build or not, is kept as
// it was: the record is rewritten as JSON objects, not through Session, so
// nothing this build does not know is lost.
func renameKeeper(tx *bolt.Tx) error {
	return rewrite(tx, func(_ []byte, rec map[string]json.RawMessage) error {
		keeper, ok := rec["keeper"]
		if !ok {
			return nil
		}
		delete(rec, "keeper")
		if string(keeper) == "null" {
			return nil
		}
		var tree map[string]json.RawMessage
		if err := json.Unmarshal(keeper, &tree); err != nil {
			return fmt.Errorf("keeper: %w", err)
		}
		if sock, ok := tree["socket"]; ok {
			delete(tree, "socket")
			tree["keeper_socket"] = sock
		}
		b, err := json.Marshal(tree)
		if err != nil {
			return err
		}
		rec["tree"] = b
		return nil
	})
}

// rawEnvs is the migration from version 3 to 4: each environment, a
// JSON array of NAME=value (or null: none recorded), becomes its entries
// each followed by a NUL (null: no key).
func rawEnvs(tx *bolt.Tx) error {
	envs, err := tx.CreateBucketIfNotExists(envBucket)
	if err != nil {
		return err
	}
	type kv struct{ k, v []byte }
	var out []kv
	err = envs.ForEach(func(k, v []byte) error {
		var env []string
		if err := json.Unmarshal(v, &env); err != nil {
			return fmt.Errorf("session %q environment: %w", k, err)
		}
		b, err := encodeEnv(env)
		if err != nil {
			return fmt.Errorf("session %q environment: %w", k, err)
		}
		out = append(out, kv{append([]byte(nil), k...), b})
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range out {
		if r.v == nil {
			err = envs.Delete(r.k)
		} else {
			err = envs.Put(r.k, r.v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// encodeEnv is env as stored: each entry followed by a NUL (nil for a
// nil env, empty for an empty one). An entry holding a NUL cannot be
// stored (nor be a process's environment).
func encodeEnv(env []string) ([]byte, error) {
	if env == nil {
		return nil, nil
	}
	n := 0
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			k, _, _ := strings.Cut(kv, "=")
			return nil, fmt.Errorf("environment variable %q holds a NUL byte", k)
		}
		n += len(kv) + 1
	}
	b := make([]byte, 0, n)
	for _, kv := range env {
		b = append(append(b, kv...), 0)
	}
	return b, nil
}

// decodeEnv is the environment stored as b (nil for no key).
func decodeEnv(b []byte) ([]string, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) > 0 && b[len(b)-1] != 0 {
		return nil, errors.New("not NUL-ended entries (a torn or foreign value)")
	}
	env := make([]string, 0, bytes.Count(b, []byte{0}))
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		env = append(env, string(b[:i]))
		b = b[i+1:]
	}
	return env, nil
}

// cwdBytes is the JSON shape of a record's cwd: "cwd" as text, and
// "cwd_bytes" (base64) exactly when it is not UTF-8 (encoding/json would
// replace such bytes with U+FFFD).
type cwdBytes struct {
	CwdBytes []byte `json:"cwd_bytes,omitempty"`
}

// marshalRecord is rec (without its environment) as stored.
func marshalRecord(rec *Session) ([]byte, error) {
	type plain Session
	if utf8.ValidString(rec.Cwd) {
		return json.Marshal((*plain)(rec))
	}
	return json.Marshal(struct {
		*plain
		cwdBytes
	}{(*plain)(rec), cwdBytes{[]byte(rec.Cwd)}})
}

// unmarshalRecord reads a stored record into rec.
func unmarshalRecord(b []byte, rec *Session) error {
	type plain Session
	var cb cwdBytes
	if err := json.Unmarshal(b, &struct {
		*plain
		*cwdBytes
	}{(*plain)(rec), &cb}); err != nil {
		return err
	}
	if cb.CwdBytes != nil {
		rec.Cwd = string(cb.CwdBytes)
	}
	return nil
}

// Open opens (creating if needed) the database at path with mode 0600 and
// brings it to Version. It waits at most a second for another process's
// lock, then fails with ErrLocked.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("store %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	if err := db.Update(migrate); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// migrate runs the pending migrations in one transaction.
func migrate(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(metaBucket)
	if err != nil {
		return err
	}
	v := 0
	if b := meta.Get(versionKey); b != nil {
		if v, err = strconv.Atoi(string(b)); err != nil {
			return fmt.Errorf("schema version %q: %w", b, err)
		}
	}
	if v > Version {
		return fmt.Errorf("schema version %d, this corral reads up to %d: %w; run the newer corral, or move the database aside to start afresh", v, Version, ErrNewerSchema)
	}
	for ; v < Version; v++ {
		if err := migrations[v](tx); err != nil {
			return fmt.Errorf("migration %d to %d: %w", v, v+1, err)
		}
	}
	return meta.Put(versionKey, []byte(strconv.Itoa(Version)))
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// put writes rec in tx: the record without its environment, and the
// environment apart.
func put(tx *bolt.Tx, rec *Session) error {
	env, err := encodeEnv(rec.Env)
	if err != nil {
		return fmt.Errorf("session %q: %w", rec.Name, err)
	}
	b, err := marshalRecord(rec)
	if err != nil {
		return err
	}
	if err := tx.Bucket(sessionsBucket).Put([]byte(rec.Name), b); err != nil {
		return err
	}
	if env == nil {
		return tx.Bucket(envBucket).Delete([]byte(rec.Name))
	}
	return tx.Bucket(envBucket).Put([]byte(rec.Name), env)
}

// get reads the whole record of name in tx (nil if there is none).
func get(tx *bolt.Tx, name string) (*Session, error) {
	b := tx.Bucket(sessionsBucket).Get([]byte(name))
	if b == nil {
		return nil, nil
	}
	rec := new(Session)
	if err := unmarshalRecord(b, rec); err != nil {
		return nil, fmt.Errorf("session %q: %w", name, err)
	}
	var err error
	if rec.Env, err = decodeEnv(tx.Bucket(envBucket).Get([]byte(name))); err != nil {
		return nil, fmt.Errorf("session %q environment: %w", name, err)
	}
	return rec, nil
}

// Put writes rec, replacing any record of the same name.
func (s *Store) Put(rec *Session) error {
	if err := CheckName(rec.Name); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, rec) })
}

// Get reads the record of name.
func (s *Store) Get(name string) (*Session, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	var rec *Session
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		if rec, err = get(tx, name); err == nil && rec == nil {
			err = fmt.Errorf("session %q: %w", name, ErrNotFound)
		}
		return err
	})
	return rec, err
}

// Update applies fn to the record of name and writes the result, in one
// transaction (so concurrent updates of the same record do not lose each
// other's changes).
func (s *Store) Update(name string, fn func(*Session) error) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		rec, err := get(tx, name)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("session %q: %w", name, ErrNotFound)
		}
		if err := fn(rec); err != nil {
			return err
		}
		rec.Name = name
		return put(tx, rec)
	})
}

// Delete removes the record of name; a missing one is ErrNotFound.
func (s *Store) Delete(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(sessionsBucket)
		if bk.Get([]byte(name)) == nil {
			return fmt.Errorf("session %q: %w", name, ErrNotFound)
		}
		if err := tx.Bucket(envBucket).Delete([]byte(name)); err != nil {
			return err
		}
		return bk.Delete([]byte(name))
	})
}

// List returns every record, by name, from one consistent snapshot,
// without their environments (Env is nil): a listing reads only what it
// shows.
func (s *Store) List() ([]*Session, error) { return s.list(false) }

// All is List with every record's environment.
func (s *Store) All() ([]*Session, error) { return s.list(true) }

func (s *Store) list(withEnv bool) ([]*Session, error) {
	var out []*Session
	err := s.db.View(func(tx *bolt.Tx) error {
		envs := tx.Bucket(envBucket)
		return tx.Bucket(sessionsBucket).ForEach(func(k, v []byte) error {
			var rec Session
			if err := unmarshalRecord(v, &rec); err != nil {
				return fmt.Errorf("session %q: %w", k, err)
			}
			if withEnv {
				var err error
				if rec.Env, err = decodeEnv(envs.Get(k)); err != nil {
					return fmt.Errorf("session %q environment: %w", k, err)
				}
			}
			out = append(out, &rec)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// Count returns the number of records.
func (s *Store) Count() (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(sessionsBucket).Stats().KeyN
		return nil
	})
	return n, err
}
