package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/wire"
)

// stream serves the answer of a call whose output streams, Exec's and
// Resume's, once c.send has sent the call on wc: output frames, written
// to o.Stdout and o.Stderr as they come, then the command's result (or
// an error frame), which is always the last frame. It owns wc from here:
// cancelling ctx closes it, and it is given back for another call only
// when the answer ended on a frame boundary and no stdin went on it.
//
// While the answer comes, o.Interrupt and o.Kill send a cancel or a kill
// frame; stdin, if not nil, is sent as stdin frames until it ends (then
// an EOF frame) or one of those was sent, after which the daemon is not
// taking it. With jobs, a job frame goes to o.OnJob (a detached Exec);
// without, it is an error, as any frame not listed here; call names the
// call in that error ("an exec call").
func (c *Client) stream(ctx context.Context, wc *wire.Conn, call string, o *ExecOptions, stdin io.Reader, jobs bool) (*Result, error) {
	nc := wc.Net()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	clean := false
	var wg sync.WaitGroup
	done := make(chan struct{})
	defer func() {
		close(done)
		wg.Wait()
		// A connection that carried stdin may still get a late write
		// from its reader: it is not reused.
		if stop() && clean && stdin == nil {
			c.put(wc)
		} else {
			nc.Close()
		}
	}()
	// After an interrupt no more stdin is sent (a send of stdin the daemon
	// is not taking, blocked on a full socket, holds the connection until
	// the daemon reads on).
	var stopped sync.Once
	stoppedc := make(chan struct{})
	stopSending := func() { stopped.Do(func() { close(stoppedc) }) }
	if stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := stdin.Read(buf)
				select {
				case <-stoppedc:
					return
				case <-done:
					return
				default:
				}
				if n > 0 && wc.WriteFrame(wire.FrameStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					wc.WriteFrame(wire.FrameEOF, nil)
					return
				}
			}
		}()
	}
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
					stopSending()
					wc.WriteJSON(wire.FrameCancel, wire.Cancel{Signal: int(o.interruptSignal())})
				case <-kill:
					kill = nil
					stopSending()
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
		switch {
		case typ == wire.FrameStdout:
			if o.Stdout != nil {
				o.Stdout.Write(b)
			}
		case typ == wire.FrameStderr:
			if o.Stderr != nil {
				o.Stderr.Write(b)
			}
		case typ == wire.FrameJob && jobs:
			if err := onJob(b, o); err != nil {
				return nil, err
			}
		case typ == wire.FrameError:
			clean = true
			return nil, decodeError(b)
		case typ == wire.FrameReply:
			res, err := resultOf(b)
			if res != nil {
				clean = true
			}
			return res, err
		default:
			return nil, fmt.Errorf("the daemon sent a %q frame during %s", typ, call)
		}
	}
}

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

// resultOf decodes a Result frame as Exec and Resume return it: nil and
// the decoding error, or the result with its error (nil only if the
// command exited 0 and its state was recorded).
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
