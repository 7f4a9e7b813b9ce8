//go:build unix && !linux

package contain

import "golang.org/x/sys/unix"

// terminateWith is Terminate sending sig: the group, once (sent records
// the group leader).
func (t *bsdTree) terminateWith(sig unix.Signal, sent map[int]bool) error {
	if sent[t.ident.Pgid] {
		return nil
	}
	sent[t.ident.Pgid] = true
	return t.signal(sig)
}
