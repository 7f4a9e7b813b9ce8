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

// User is a throwaway local user made for one test: another uid to play an
// attacker (or a stranger) with.
type User struct {
	Name     string
	Uid, Gid int
}

// ThrowawayUser creates a system user with a random name and no home
// (useradd -M -r) and deletes it (userdel) at cleanup. It skips the test,
// saying why, unless the test runs as root with useradd available.
func ThrowawayUser(t testing.TB) User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a second user (useradd)")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("no useradd to create a second user")
	}
	var b [5]byte
	rand.Read(b[:])
	name := "crltest" + hex.EncodeToString(b[:])
	if out, err := exec.Command("useradd", "-M", "-r", "-s", "/bin/sh", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a second user: useradd: %v: %s", err, out)
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

// Run runs a shell script as u (no supplementary groups), with env, and
// fails the test if it fails.
func (u User) Run(t testing.TB, env []string, script string) {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", script)
	c.Env = env
	c.Dir = "/"
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.Uid), Gid: uint32(u.Gid), Groups: []uint32{}}}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("as %s: %s: %v: %s", u.Name, script, err, out)
	}
}
