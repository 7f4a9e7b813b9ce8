package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/wire"
)

// onJob hands a detached exec's job id to o.OnJob.
func onJob(b []byte, o *ExecOptions) error {
	var j wire.Job
	if err := wire.Decode(b, &j); err != nil {
		return err
	}
	if !o.DetachOnDisconnect {
		return fmt.Errorf("the daemon sent a job frame for an exec that did not ask to detach")
	}
	if o.OnJob != nil {
		o.OnJob(j.Job)
	}
	return nil
}

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
	nc := wc.Net()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	clean := false
	var wg sync.WaitGroup
	done := make(chan struct{})
	defer func() {
		close(done)
		wg.Wait()
		if stop() && clean {
			c.put(wc)
		} else {
			nc.Close()
		}
	}()
	if o.Interrupt != nil || o.Kill != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			interrupt, kill := o.Interrupt, o.Kill
			for interrupt != nil || kill != nil {
				select {
				case <-done:
					return
				case <-interrupt:
					interrupt = nil
					wc.WriteJSON(wire.FrameCancel, wire.Cancel{Signal: int(o.interruptSignal())})
				case <-kill:
					kill = nil
					wc.WriteFrame(wire.FrameKill, nil)
				}
			}
		}()
	}
	var rbuf []byte // for output frames, from the second on; each is used before the next is read
	for {
		typ, b, err := wc.ReadFrameInto(wire.MaxControl, rbuf)
		if err != nil {
			return nil, c.broken(ctx, err)
		}
		if rbuf == nil && (typ == wire.FrameStdout || typ == wire.FrameStderr) {
			rbuf = make([]byte, wire.MaxOutputChunk)
		}
		switch typ {
		case wire.FrameStdout:
			if o.Stdout != nil {
				o.Stdout.Write(b)
			}
		case wire.FrameStderr:
			if o.Stderr != nil {
				o.Stderr.Write(b)
			}
		case wire.FrameError:
			clean = true
			return nil, decodeError(b)
		case wire.FrameReply:
			clean = true
			return resultOf(b)
		default:
			return nil, fmt.Errorf("the daemon sent a %q frame during a resume call", typ)
		}
	}
}

// resultOf decodes a Result frame as Exec returns it.
func resultOf(b []byte) (*Result, error) {
	var w wire.Result
	if err := wire.Decode(b, &w); err != nil {
		return nil, err
	}
	res := &Result{Result: *w.Corral(), Cwd: w.CwdText(), Limits: w.Limits.Corral(), LimitsChanged: w.LimitsChanged}
	var errs []error
	if res.Outcome != corral.OutcomeExited || res.ExitCode != 0 {
		errs = append(errs, &corral.RunError{Result: &res.Result})
	}
	if w.StateNotSaved != "" {
		errs = append(errs, &StateNotSavedError{Reason: w.StateNotSaved})
	}
	if len(errs) == 1 {
		return res, errs[0]
	}
	return res, errors.Join(errs...)
}
