//go:build unix && !linux

package contain

import "golang.org/x/sys/unix"

// terminateWith is Terminate sending sig: the group, once.
func (t *bsdTree) terminateWith(sig unix.Signal) error {
	if t.termed {
		return nil
	}
	t.termed = true
	return t.signal(sig)
}
