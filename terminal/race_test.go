//go:build race

package terminal

// raceEnabled: the race detector multiplies a process's memory (its shadow
// memory), so bounds on a holder's RSS do not hold under it.
const raceEnabled = true
