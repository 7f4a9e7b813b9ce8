package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/wire"
	"github.com/corral-dev/corral/terminal"
)

// termHangupPoll is how often a term_wait looks whether its client hung up.
const termHangupPoll = 200 * time.Millisecond

// term serves the terminal calls (wire/term.go).
func (s *Server) term(c *wire.Conn, peer daemon.Peer, call *wire.Call) (func() (wire.Header, error), bool) {
	direct := func() (wire.Header, error) { return c.ReadHeader() }
	reply := func(v any, err error) (func() (wire.Header, error), bool) {
		if err != nil {
			return direct, s.answer(c, wire.FrameError, wireErr(err))
		}
		return direct, s.answer(c, wire.FrameReply, v)
	}
	t := call.Term
	if t == nil {
		return reply(nil, fmt.Errorf("%w: a %s call without its term", daemon.ErrBadRequest, call.Call))
	}
	ctx := context.Background()
	switch call.Call {
	case wire.CallTermOpen:
		info, err := s.d.TermOpen(ctx, peer, daemon.TermOpenRequest{Name: t.Name, Command: t.Command, Cwd: t.Cwd, Env: t.Env,
			Cols: t.Cols, Rows: t.Rows, SizePolicy: t.SizePolicy, Existing: t.Existing})
		if err != nil {
			return reply(nil, err)
		}
		return reply(openedOf(info), nil)
	case wire.CallTermSend:
		return reply(struct{}{}, s.d.TermSend(ctx, peer, t.Name, t.Data, t.Keys))
	case wire.CallTermScreen:
		scr, err := s.d.TermScreen(ctx, peer, t.Name, terminal.ScreenOptions{ANSI: t.ANSI, Scrollback: t.Scrollback})
		if err != nil {
			return reply(nil, err)
		}
		return reply(wire.TermScreen{Cols: scr.Cols, Rows: scr.Rows, Text: scr.Text, Scrollback: scr.Scrollback,
			CursorX: scr.CursorX, CursorY: scr.CursorY, CursorVisible: scr.CursorVisible, Title: scr.Title,
			AltScreen: scr.AltScreen, Status: statusOf(scr.Status)}, nil)
	case wire.CallTermWait:
		// The client's hang-up ends the wait: nothing reads its answer.
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(termHangupPoll)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if peerHungUp(c.Net()) {
						cancel()
						return
					}
				}
			}
		}()
		r, err := s.d.TermWait(ctx, peer, t.Name, terminal.WaitOptions{Text: t.Text, Idle: time.Duration(t.IdleMs) * time.Millisecond,
			Exit: t.Exit, Timeout: time.Duration(t.TimeoutMs) * time.Millisecond})
		hungUp := ctx.Err() != nil
		cancel()
		wg.Wait()
		if hungUp {
			return nil, false
		}
		if err != nil {
			return reply(nil, err)
		}
		return reply(wire.TermWaited{Reason: r.Reason, Match: r.Match, Status: statusOf(r.Status)}, nil)
	case wire.CallTermResize:
		return reply(struct{}{}, s.d.TermResize(ctx, peer, t.Name, t.Cols, t.Rows))
	case wire.CallTermAttach:
		return s.termAttach(c, peer, t)
	}
	return reply(nil, fmt.Errorf("%w: unknown terminal call %q", daemon.ErrBadRequest, call.Call))
}

func openedOf(info *daemon.TermInfo) wire.TermOpened {
	return wire.TermOpened{Name: info.Name, Created: info.Created, Started: info.Started, HolderPid: info.HolderPid,
		Cols: info.Cols, Rows: info.Rows, Command: info.Command}
}

func statusOf(st terminal.Status) wire.TermStatus {
	ws := wire.TermStatus{HolderPid: st.HolderPid, Exited: st.Exited, ExitCode: st.ExitCode, Signal: st.Signal,
		Outcome: st.Outcome, Error: st.Error}
	if !st.Exited {
		ws.Pid = st.Tree.Pid
	}
	return ws
}

// termAttach relays an attached client and its session's holder until
// the client detaches, the program exits or either side goes; the
// connection is closed after. Output waits at most the send-stall bound
// for the client (the holder meanwhile bounds what it queues for this
// client, and redraws it when it falls behind: the program never waits).
func (s *Server) termAttach(c *wire.Conn, peer daemon.Peer, t *wire.Term) (func() (wire.Header, error), bool) {
	ctx := context.Background()
	tc, err := s.d.TermAttach(ctx, peer, daemon.TermAttachRequest{Name: t.Name, Cols: t.Cols, Rows: t.Rows,
		ReadOnly: t.ReadOnly, Scrollback: t.Scrollback})
	if err != nil {
		s.answer(c, wire.FrameError, wireErr(err))
		return nil, false
	}
	defer tc.Close()
	opened := wire.TermOpened{Name: t.Name, HolderPid: tc.HolderPid()}
	opened.Cols, opened.Rows = tc.Size()
	if !s.answer(c, wire.FrameReply, opened) {
		return nil, false
	}
	nc := c.Net()
	// The client's frames: input, resizes, a detach. Its going away
	// detaches.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			typ, b, err := c.ReadFrame(wire.MaxControl)
			if err != nil {
				tc.Detach()
				tc.Close()
				return
			}
			switch typ {
			case wire.FrameStdin:
				tc.Write(b)
			case wire.FrameTermResize:
				var sz wire.TermSize
				if wire.Decode(b, &sz) == nil {
					tc.Resize(sz.Cols, sz.Rows)
				}
			case wire.FrameTermDetach:
				tc.Detach()
				return // the client sends nothing after a detach
			default:
				tc.Detach()
				tc.Close()
				return
			}
		}
	}()
	buf := make([]byte, wire.MaxOutputChunk)
	var rerr error
	for {
		n, err := tc.Read(buf)
		if n > 0 {
			nc.SetWriteDeadline(time.Now().Add(s.stall))
			werr := c.WriteFrame(wire.FrameTermOutput, buf[:n])
			nc.SetWriteDeadline(time.Time{})
			if werr != nil {
				if timedOut(werr) {
					s.cfg.Log.Warn("attached client read none of its output; detached", "session", t.Name, "bound", s.stall)
				}
				rerr = werr
				break
			}
		}
		if err != nil {
			rerr = err
			break
		}
	}
	end := wire.TermEnded{}
	switch {
	case errors.Is(rerr, io.EOF):
		if st := tc.Exit(); st != nil {
			end.Status = statusOf(*st)
		}
	case errors.Is(rerr, terminal.ErrDetached):
		end.Detached = true
	}
	tc.Close()
	// The reader ends on its own after a detach; otherwise it is cut
	// off (the connection is closed after this call either way).
	nc.SetReadDeadline(time.Now())
	wg.Wait()
	if end.Detached || end.Status.Exited {
		s.answer(c, wire.FrameReply, end)
	} else if rerr != nil {
		s.answer(c, wire.FrameError, wireErr(fmt.Errorf("terminal session %s: attach: %w", t.Name, rerr)))
	}
	return nil, false
}

// termInfoOf is a listing's terminal part (nil for an exec session).
func termInfoOf(ti *daemon.TermListInfo) *wire.TermInfo {
	if ti == nil {
		return nil
	}
	return &wire.TermInfo{Command: ti.Command, Cols: ti.Cols, Rows: ti.Rows, SizePolicy: ti.SizePolicy,
		HolderPid: ti.HolderPid, Exited: ti.Exited, ExitCode: ti.ExitCode}
}
