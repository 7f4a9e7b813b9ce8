//go:build unix && !linux && !darwin

package contain

import "fmt"

// groupMembers is not implemented on the BSDs: the tree cannot be listed, so
// Run kills the group when the root exits and relies on the drain bound.
func groupMembers(pgid int) ([]int, error) {
	return nil, fmt.Errorf("listing group %d: %w", pgid, ErrUnsupported)
}
