package contain

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCommonAncestor: the cgroup whose cgroup.procs a move between two
// cgroups needs write access to.
func TestCommonAncestor(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"/sys/fs/cgroup", "/sys/fs/cgroup/corral", "/sys/fs/cgroup"},
		{"/sys/fs/cgroup/user.slice/u.scope", "/sys/fs/cgroup/user.slice/u.scope/corral", "/sys/fs/cgroup/user.slice/u.scope"},
		{"/sys/fs/cgroup/a/b", "/sys/fs/cgroup/a/c/corral", "/sys/fs/cgroup/a"},
		{"/sys/fs/cgroup/corral/t-1", "/sys/fs/cgroup/corral", "/sys/fs/cgroup/corral"},
		{"/sys/fs/cgroup/ab", "/sys/fs/cgroup/a", "/sys/fs/cgroup"}, // a prefix of the name is not an ancestor
		{"/x", "/y", "/"},
	} {
		if got := commonAncestor(c.a, c.b); got != c.want {
			t.Errorf("commonAncestor(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}

// TestDeniedEntry: a permission error from fork/exec is the cgroup's only
// when the program and its directory are ours to run and enter.
func TestDeniedEntry(t *testing.T) {
	noExec := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	denied := func(path string, err error) error { return &os.PathError{Op: "fork/exec", Path: path, Err: err} }
	for _, c := range []struct {
		name string
		err  error
		spec Spec
		want bool
	}{
		{"runnable program", denied("/bin/sh", unix.EACCES), Spec{Path: "/bin/sh"}, true},
		{"EPERM", denied("/bin/sh", unix.EPERM), Spec{Path: "/bin/sh", Dir: "/"}, true},
		{"program not executable", denied(noExec, unix.EACCES), Spec{Path: noExec}, false},
		{"directory missing", denied("/bin/sh", unix.EACCES), Spec{Path: "/bin/sh", Dir: "/no/such/dir"}, false},
		{"another errno", denied("/bin/sh", unix.ENOENT), Spec{Path: "/bin/sh"}, false},
		{"a hold hook's error", fmt.Errorf("%w: %w", ErrHold, unix.EACCES), Spec{Path: "/bin/sh"}, false},
	} {
		if got := deniedEntry(c.err, &c.spec); got != c.want {
			t.Errorf("%s: deniedEntry = %v, want %v", c.name, got, c.want)
		}
	}
}
