package contain

import "testing"

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
