package contain

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// terminateWith sends sig to every process of the cgroup not signalled
// before (see terminateCgroup).
func (t *cgroupTree) terminateWith(sig unix.Signal) error {
	return terminateCgroupWith(t.dir, sig, t.termed)
}

// terminateWith is Terminate sending sig: to the group the first time,
// and to every member not signalled before, each through a checked pidfd.
func (t *pgroupTree) terminateWith(sig unix.Signal) error {
	var errs []error
	if len(t.termed) == 0 && !t.closed {
		if err := unix.Kill(-t.ident.Pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("signal group %d: %w", t.ident.Pgid, err))
		}
	}
	ms, err := t.scan()
	if err != nil {
		errs = append(errs, err)
	}
	var fresh []member
	for _, m := range ms {
		if !t.termed[m] {
			t.termed[m] = true
			fresh = append(fresh, m)
		}
	}
	if err := signalMembers(fresh, sig); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
