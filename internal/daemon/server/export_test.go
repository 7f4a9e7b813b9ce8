package server

// MaxConns and MaxCalls are the server's bounds, for the tests that press
// on them from outside the package.
const (
	MaxConns = maxConns
	MaxCalls = maxCalls
)

// CallsInFlight is how many calls hold a call slot now.
func (s *Server) CallsInFlight() int { return len(s.callSlots) }

// SetJobFinishedHook sets a function run when a detached job has recorded
// its end; nil removes it.
func SetJobFinishedHook(f func()) { testHookJobFinished = f }

// SetMaxReply sets the largest answer the server sends, and returns a
// function that puts the old one back.
func SetMaxReply(n int) func() {
	old := maxReply
	maxReply = n
	return func() { maxReply = old }
}
