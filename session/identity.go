package session

import (
	"errors"
	"fmt"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
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
	o, err := contain.Adopt(containIdentity(id))
	if errors.Is(err, contain.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("its recorded tree cannot be checked: %w", err)
	}
	pids, err := o.Members()
	if err != nil {
		return fmt.Errorf("its recorded tree cannot be listed: %w", err)
	}
	if len(pids) > 0 {
		o.Kill()
		if err := o.WaitEmpty(contain.KillBound); err != nil {
			return fmt.Errorf("its recorded tree outlived SIGKILL: %w", err)
		}
	}
	o.Remove()
	return nil
}

func publicIdentity(ci contain.Identity) corral.Identity {
	return corral.Identity{Isolation: corral.Isolation(ci.Isolation), Pid: ci.Pid, Pgid: ci.Pgid,
		Cgroup: ci.Cgroup, Job: ci.Job, StartTime: ci.StartTime, BootID: ci.BootID, Marker: ci.Marker}
}

func containIdentity(id corral.Identity) contain.Identity {
	return contain.Identity{Isolation: contain.Isolation(id.Isolation), Pid: id.Pid, Pgid: id.Pgid,
		Cgroup: id.Cgroup, Job: id.Job, StartTime: id.StartTime, BootID: id.BootID, Marker: id.Marker}
}
