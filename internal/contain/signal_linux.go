package contain

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// terminateWith sends sig to every process of the cgroup not in sent
// (see terminateCgroup).
func (t *cgroupTree) terminateWith(sig unix.Signal, sent map[int]bool) error {
	return terminateCgroupWith(t.dir, sig, sent, nil)
}

// terminateWith is Terminate sending sig: to the group the first time,
// and to every member not in sent that the group signal did not surely
// reach (one signal each, as Terminate), each through a checked pidfd. A
// pid reused within the stop is only skipped (it gets SIGTERM later),
// never signalled on a guess.
func (t *pgroupTree) terminateWith(sig unix.Signal, sent map[int]bool) error {
	var errs []error
	if !t.sigGroupDone && !t.closed {
		t.sigGroupDone = true
		t.sigGroupTick = bootTicks()
		if err := unix.Kill(-t.ident.Pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("signal group %d: %w", t.ident.Pgid, err))
		} else {
			t.sigGroupSent = true
		}
	}
	ms, err := t.scan()
	if err != nil {
		errs = append(errs, err)
	}
	var fresh []member
	for _, m := range ms {
		if !sent[m.pid] {
			sent[m.pid] = true
			if !t.sigGroupSent || !m.gotGroupSignal(t.ident.Pgid, t.sigGroupTick) {
				fresh = append(fresh, m)
			}
		}
	}
	if err := signalMembers(fresh, sig); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
