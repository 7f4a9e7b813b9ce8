package store

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
)

// TestShellFifos: a held shell's FIFO identities are kept with its tree;
// a record written before they were (no "fifos" key) reads with none.
func TestShellFifos(t *testing.T) {
	path := filepath.Join(testproc.TempDir(t), "s.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fifos{Ctl: FileID{Dev: 1, Ino: 2}, Out: FileID{Dev: 1, Ino: 3}, Err: FileID{Dev: 1, Ino: 4}}
	if err := s.Put(&Session{Name: "new", Tree: &Shell{Identity: corral.Identity{Pid: 7}, Fifos: f}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// What an earlier corral wrote, byte for byte.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(sessionsBucket).Put([]byte("old"), []byte(`{"name":"old","state":"up","tree":{"pid":8,"start_time":9,"boot_id":"b"}}`))
	})
	db.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Get("new"); err != nil || got.Tree.Fifos == nil || *got.Tree.Fifos != *f {
		t.Fatalf("new: %+v %v", got, err)
	}
	if got, err := s.Get("old"); err != nil || got.Tree == nil || got.Tree.Pid != 8 || got.Tree.Fifos != nil {
		t.Fatalf("old: %+v %v", got, err)
	}
}
