package daemon

import (
	"errors"

	"github.com/corral-dev/corral/session"
)

// The classes of the core's errors (errors.Is). A front-end maps them to
// its own codes in one place (internal/daemon/server).
var (
	// ErrBadRequest: the request is malformed or refused as given
	// (CheckExec, a session that cannot be created as asked, a command no
	// shell can run). Nothing was created or run.
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound: no session of that name.
	ErrNotFound = errors.New("no such session")
	// ErrStopping: the daemon is stopping; nothing starts now.
	ErrStopping = errors.New("the daemon is stopping")
	// ErrBroken: the session's recorded shell can be neither taken over
	// nor settled; corral kill drops it.
	ErrBroken = errors.New("session broken")
	// ErrRecovering: the session is still being recovered after a
	// restart; try again.
	ErrRecovering = errors.New("session still being recovered")
	// ErrPermission: the peer may not use this daemon.
	ErrPermission = errors.New("permission denied")
	// ErrSessionClosed: the session was killed or closed under the call.
	ErrSessionClosed = session.ErrClosed
)

// classed is err, which is also of class (errors.Is), with err's message.
type classed struct{ err, class error }

func (e *classed) Error() string   { return e.err.Error() }
func (e *classed) Unwrap() []error { return []error{e.err, e.class} }

// badRequest is err, as ErrBadRequest.
func badRequest(err error) error { return &classed{err, ErrBadRequest} }
