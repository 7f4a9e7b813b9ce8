package testproc

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"
)

// User is a throwaway user made for one test.
type User struct {
	Name     string
	Uid, Gid int
}

// NewUser creates a system user with a random name and no home directory
// (useradd -M -r) and deletes it at cleanup; it skips the test unless we
// are root. Call it before Guard, so that the user's processes are gone
// (Guard's cleanup kills survivors) by the time it is deleted.
func NewUser(t testing.TB) User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to create a second user")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skipf("no useradd here: %v", err)
	}
	var b [4]byte
	rand.Read(b[:])
	name := "corral-t" + hex.EncodeToString(b[:])
	if out, err := exec.Command("useradd", "-M", "-r", "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return User{Name: name, Uid: uid, Gid: gid}
}

// Credential makes a command run as the user, with no supplementary
// groups.
func (u User) Credential() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.Uid), Gid: uint32(u.Gid), Groups: []uint32{}}}
}

// Dir makes a directory owned by the user (mode 0700) under a fresh
// temporary directory that the user can reach, removed at cleanup.
func (u User) Dir(t testing.TB) string {
	t.Helper()
	parent := TempDir(t)
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	d := parent + "/" + u.Name
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, u.Uid, u.Gid); err != nil {
		t.Fatal(err)
	}
	return d
}

// Run runs a shell script as u (no supplementary groups), with env, and
// fails the test if it fails.
func (u User) Run(t testing.TB, env []string, script string) {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", script)
	c.Env = env
	c.Dir = "/"
	c.SysProcAttr = u.Credential()
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("as %s: %s: %v: %s", u.Name, script, err, out)
	}
}
