package session

import (
	"errors"

	"github.com/corral-dev/corral"
)

var (
	// ErrSessionUnusable means the session's shell was found gone before
	// the command was handed to it: the command did not run. Exec retries
	// such a command once on a fresh shell, and returns this error only if
	// the fresh shell is unusable too.
	ErrSessionUnusable = errors.New("session unusable")
	// ErrClosed means the session was closed.
	ErrClosed = errors.New("session closed")
	// ErrBadCommand means the command text cannot be run by a shell (it
	// contains a NUL byte).
	ErrBadCommand = corral.ErrBadCommand
	// ErrUnsupported means this platform has no sessions.
	ErrUnsupported = corral.ErrUnsupported
)
