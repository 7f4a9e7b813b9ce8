package session

import (
	"errors"
	"fmt"

	"github.com/corral-dev/corral"
)

// Reap kills whatever is left of a held shell's tree that no one holds
// (its shell gone, say, with a command's background jobs still running),
// through the identity recorded by Config.OnStart: nothing the identity
// does not prove to be part of the tree is signalled. It returns nil when
// nothing of the tree is left (or can be: another boot, no cgroup), and an
// error when the identity cannot be checked (it names a cgroup corral does
// not make, or this platform cannot re-find trees) or the tree outlived
// SIGKILL.
func Reap(id corral.Identity) error {
	o, err := corral.FindOrphan(id)
	if errors.Is(err, corral.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("its recorded tree cannot be checked: %w", err)
	}
	if _, err := o.Members(); err != nil {
		return fmt.Errorf("its recorded tree cannot be listed: %w", err)
	}
	// What is left of an empty tree (its cgroup) is removed if it can
	// be; that it cannot is no reason to keep the session broken.
	if err := o.Kill(); errors.Is(err, corral.ErrKillFailed) {
		return fmt.Errorf("its recorded tree outlived SIGKILL: %w", err)
	}
	return nil
}
