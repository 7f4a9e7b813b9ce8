package wire

import "errors"

// Kind is the kind of an error on the wire: what a client can act on.
type Kind string

// The error kinds. A receiver that does not know a kind treats it as
// internal.
const (
	KindBadRequest    Kind = "bad_request"     // the request is malformed or refused as given
	KindNotFound      Kind = "not_found"       // no such session
	KindSessionClosed Kind = "session_closed"  // the session was killed or closed under the call
	KindStopping      Kind = "daemon_stopping" // the daemon is stopping
	KindBroken        Kind = "broken"          // the session's shell cannot be checked or settled
	KindRecovering    Kind = "recovering"      // the session is still being recovered; try again
	KindBusy          Kind = "busy"            // the session is busy and the call would not wait
	KindPermission    Kind = "permission"      // the peer may not use this daemon
	KindNotReading    Kind = "not_reading"     // the client read none of the output within the daemon's bound
	KindVersion       Kind = "unsupported_version"
	KindStateNotSaved Kind = "state_not_saved" // the command ran; its session's state was not recorded
	KindInternal      Kind = "internal"
)

// The errors each kind is (errors.Is): the one mapping from kinds to Go
// errors. Package client exports them.
var (
	ErrBadRequest    = errors.New("bad request")
	ErrNotFound      = errors.New("no such session")
	ErrSessionClosed = errors.New("session closed")
	ErrStopping      = errors.New("the daemon is stopping")
	ErrBroken        = errors.New("session broken")
	ErrRecovering    = errors.New("session still being recovered")
	ErrBusy          = errors.New("session busy")
	ErrPermission    = errors.New("permission denied by the daemon")
	ErrNotReading    = errors.New("the client read none of the command's output")
	ErrVersion       = errors.New("no protocol version in common")
	ErrStateNotSaved = errors.New("the session's state (cwd, environment) was not saved")
	ErrInternal      = errors.New("internal error in the daemon")
)

var kindErr = map[Kind]error{
	KindBadRequest: ErrBadRequest, KindNotFound: ErrNotFound, KindSessionClosed: ErrSessionClosed,
	KindStopping: ErrStopping, KindBroken: ErrBroken, KindRecovering: ErrRecovering, KindBusy: ErrBusy,
	KindPermission: ErrPermission, KindNotReading: ErrNotReading, KindVersion: ErrVersion,
	KindStateNotSaved: ErrStateNotSaved, KindInternal: ErrInternal,
}

// Kinds lists every kind (for tests and other implementations).
func Kinds() []Kind {
	out := make([]Kind, 0, len(kindErr))
	for k := range kindErr {
		out = append(out, k)
	}
	return out
}

// Error is an error on the wire: the payload of an Error frame.
type Error struct {
	Kind    Kind   `json:"kind"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Is reports whether target is the error of e's kind (an unknown kind is
// ErrInternal).
func (e *Error) Is(target error) bool {
	want, ok := kindErr[e.Kind]
	if !ok {
		want = ErrInternal
	}
	return target == want
}

// Unwrap returns the error of e's kind, so that errors.Is also sees it
// through wrapping.
func (e *Error) Unwrap() error {
	if err, ok := kindErr[e.Kind]; ok {
		return err
	}
	return ErrInternal
}
