package contain

// Proc names one process for as long as the boot lasts: its pid and its
// start time in clock ticks after boot.
type Proc struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// Adopted lists the live processes of the pgroup tree ident that this
// process, the tree's owner, holds as the tree's only because they were
// reparented to it (a `setsid -f env -i CMD` whose parent exited): they
// carry no marker, are in no group of the tree and have no member as
// parent. Once the owner is gone nothing links them to the tree, so the
// owner records them (with AdoptWith they are then found again). It is
// empty where the owner cannot tell its tree's orphans from others (it
// runs several trees, or starts children outside corral) and on systems
// without a child subreaper.
func Adopted(ident Identity) []Proc { return adopted(ident) }

// AdoptWith is Adopt for a tree whose owner recorded procs (from Adopted)
// as its members while it ran: each is the tree's while its pid still
// names the process that started at the recorded time, and so are its
// descendants.
func AdoptWith(ident Identity, procs []Proc) (Orphan, error) { return adoptWith(ident, procs) }
