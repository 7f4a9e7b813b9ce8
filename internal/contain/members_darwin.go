package contain

import "golang.org/x/sys/unix"

// groupMembers lists the live (non-zombie) processes of a process group.
func groupMembers(pgid int) ([]int, error) {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.pgrp", pgid)
	if err != nil {
		return nil, err
	}
	const szomb = 5 // p_stat of a zombie
	var pids []int
	for _, p := range procs {
		if p.Proc.P_stat != szomb {
			pids = append(pids, int(p.Proc.P_pid))
		}
	}
	return pids, nil
}
