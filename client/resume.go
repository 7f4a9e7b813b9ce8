package client

import (
	"context"
	"fmt"

	"github.com/corral-dev/corral/internal/wire"
)

// Resume continues the output of a detached job (an Exec with
// DetachOnDisconnect whose client went away, or any still kept) from byte
// offset of its whole output (stdout and stderr counted together, in the
// order the daemon sent them: an Exec's client that counted the bytes it
// was given knows where it stopped), writing to o.Stdout and o.Stderr,
// and returns the command's result, which comes last, as Exec does. While
// the command runs, o.Interrupt and o.Kill stop it as they do for Exec;
// the other fields of o are not used. An unknown job is ErrNotFound; an
// offset the daemon no longer keeps (or past the output so far) is
// ErrBadRequest, saying which range it keeps. Cancelling ctx, or losing
// the connection, leaves the command running: resume again.
func (c *Client) Resume(ctx context.Context, job string, offset int64, o ExecOptions) (*Result, error) {
	if offset < 0 {
		return nil, fmt.Errorf("%w: offset %d: want 0 or more", ErrBadRequest, offset)
	}
	wc, err := c.send(ctx, wire.Call{Call: wire.CallResume, Resume: &wire.Resume{Job: job, Offset: offset}})
	if err != nil {
		return nil, err
	}
	return c.stream(ctx, wc, "a resume call", &o, nil, false)
}
