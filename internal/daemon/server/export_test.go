package server

// MaxConns and MaxCalls are the server's bounds, for the tests that press
// on them from outside the package.
const (
	MaxConns = maxConns
	MaxCalls = maxCalls
)
