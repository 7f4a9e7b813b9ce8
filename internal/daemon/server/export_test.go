package server

// MaxConns and MaxCalls are the server's bounds, for the tests that press
// on them from outside the package.
const (
	MaxConns = maxConns
	MaxCalls = maxCalls
)

// CallsInFlight is how many calls hold a call slot now.
func (s *Server) CallsInFlight() int { return len(s.callSlots) }
