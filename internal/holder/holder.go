// Package holder is the process that holds one terminal session: it owns
// the PTY's master, the screen model (internal/vt) with its byte-budgeted
// scrollback, and the program, run as a contained corral Tree whose
// identity is recorded before it runs. It serves the session on a unix
// socket in the session's directory, one request per connection (see
// wire.go): attach, send, screen, wait, resize, status, close.
//
// A holder is its own session leader and the PTY is its controlling
// terminal; the program runs in its own process group in that session,
// in the terminal's foreground, as a shell's foreground job does. So the
// program has a real controlling terminal (job control, /dev/tty, Ctrl-C
// as SIGINT), and the holder depends on no other process: whoever started
// it can die (a daemon's SIGKILL) and a new owner reconnects to the
// socket. The holder ends when asked to close (or on SIGTERM): it stops
// the program's tree, answers with its status and exits.
//
// It is the per-session cost, so it is kept small: it imports neither
// gRPC nor the daemon nor the MCP SDK (TestHolderDeps).
//
// Output reaches attached clients through a queue per client bounded in
// bytes: the PTY reader never waits for a client. A client whose queue
// would pass the bound loses what is queued, is sent FrameResync and a
// redraw of the current screen, and continues from there. The reader
// forwards to the clients before the screen model sees the output; the
// model is fed from the same buffers on a goroutine of its own
// (output.go).
package holder

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/term"
	"github.com/corral-dev/corral/internal/unixsock"
	"github.com/corral-dev/corral/internal/vt"
)

// Names of the files a holder keeps in its session directory.
const (
	SocketName = "sock"        // the socket it serves on
	HolderName = "holder.json" // its own identity (a corral.Identity of its pid)
	TreeName   = "tree.json"   // the program's tree, written before it runs
)

// ClientQueueBytes bounds the output queued for one attached client.
const ClientQueueBytes = 1 << 20

// maxSpec bounds the spec read from standard input.
const maxSpec = 1 << 20

// answerBound bounds the writing of an answer to a client that does not
// read it.
const answerBound = 10 * time.Second

// exitDrain bounds the reading of the PTY after the program's tree has
// settled (a process that escaped it could hold the terminal open).
const exitDrain = 2 * time.Second

// Main is the holder process (corral holder): it reads its Spec as JSON
// from stdin, starts the session, writes one Ready line on stdout and
// closes it, then serves until closed. Logs go to stderr. It returns the
// process's exit status.
func Main(stdin io.Reader, stdout io.WriteCloser, stderr io.Writer) int {
	// One P: an idle holder then keeps fewer threads and per-P caches
	// (about 250 KiB less; BenchmarkHolderIdleMemory), and its reader,
	// feeder and client writers hand off on one thread rather than by
	// waking another (less CPU per MB, BenchmarkThroughput).
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	ready := func(r Ready) {
		json.NewEncoder(stdout).Encode(r)
		stdout.Close()
	}
	// SIGHUP is caught (not ignored, which the program would inherit)
	// and dropped from the start: closing the PTY after a failed start
	// hangs up its session, whose leader is this process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var spec Spec
	if err := json.NewDecoder(io.LimitReader(stdin, maxSpec)).Decode(&spec); err != nil {
		ready(Ready{Error: fmt.Sprintf("holder: read the session's spec from standard input: %v", err)})
		return 2
	}
	// start runs on a goroutine of its own: its deep stack (the Tree's
	// start, the records) is freed when it ends, not kept for the life of
	// the session under serve.
	var h *holder
	var err error
	started := make(chan struct{})
	go func() {
		// Locked and never unlocked: the thread ends with the
		// goroutine, rather than staying parked for the session's life.
		runtime.LockOSThread()
		defer close(started)
		h, err = start(&spec)
	}()
	<-started
	if err != nil {
		ready(Ready{Error: "holder: " + err.Error()})
		return 1
	}
	id := h.tree.Identity()
	ready(Ready{Pid: os.Getpid(), Tree: &id})
	h.serve()
	if err := h.finish(); err != nil {
		fmt.Fprintf(stderr, "holder: %v\n", err)
		return 1
	}
	return 0
}

type holder struct {
	spec   *Spec
	master *os.File
	slave  *os.File // closed once the tree has settled
	lis    net.Listener
	tree   *corral.Tree

	input chan inputReq
	// replyReady has a token when mu's replies are waiting for the input
	// writer.
	replyReady chan struct{}
	// quit is closed when the holder is to end (close, SIGTERM); exited
	// once the program's tree has settled and its output has been read.
	quit     chan struct{}
	quitOnce sync.Once
	exited   chan struct{}
	wg       sync.WaitGroup // every goroutine but serve's caller

	// out is the forwarding side of the output (output.go): the attached
	// clients and the output not yet fed to the screen model.
	out outQueue

	// mu guards the fields that follow; lock order: mu, then out.mu,
	// then a client's mu.
	mu         sync.Mutex
	vt         *vt.Terminal
	conns      map[net.Conn]struct{}
	changed    chan struct{} // closed and replaced when the screen or status changes
	lastOutput time.Time
	replies    []byte
	status     Status
}

type inputReq struct {
	b    []byte
	done chan error
}

func start(spec *Spec) (h *holder, err error) {
	if spec.Dir == "" || spec.Path == "" {
		return nil, errors.New("the spec needs dir and path")
	}
	if err := term.CheckSize(spec.Cols, spec.Rows); err != nil {
		return nil, err
	}
	// The holder must lead its own session to take the PTY as its
	// controlling terminal, and so that no one else's hangup reaches it.
	if pid := os.Getpid(); unixGetsid() != pid {
		if err := unixSetsid(); err != nil {
			return nil, fmt.Errorf("become a session leader (start the holder with setsid): %w", err)
		}
	}
	dir, err := filepath.Abs(spec.Dir)
	if err != nil {
		return nil, err
	}
	if _, err := statedir.Ensure(filepath.Dir(dir), filepath.Base(dir)); err != nil {
		return nil, err
	}
	spec.Dir = dir
	if err := writeSelf(filepath.Join(dir, HolderName)); err != nil {
		return nil, err
	}
	contain.OwnAllChildren()

	master, slave, err := term.OpenPTY(spec.Cols, spec.Rows)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			master.Close()
			slave.Close()
		}
	}()
	if err := term.SetControlling(slave); err != nil {
		return nil, err
	}
	// The slave becomes this process's descriptor 0 too: the foreground
	// handoff of the program's start (syscall.SysProcAttr.Foreground)
	// names the terminal by a descriptor of the parent, and contain gives
	// it descriptor 0, where a shell has its terminal.
	if err := dupStdin(slave); err != nil {
		return nil, fmt.Errorf("put the terminal on descriptor 0: %w", err)
	}
	h = &holder{
		spec: spec, master: master, slave: slave,
		input: make(chan inputReq), replyReady: make(chan struct{}, 1),
		quit: make(chan struct{}), exited: make(chan struct{}),
		conns:   map[net.Conn]struct{}{},
		changed: make(chan struct{}), lastOutput: time.Now(),
		status: Status{HolderPid: os.Getpid(), ExitCode: -1},
	}
	// Answers to the program's queries go back to it through the input
	// writer; Reply runs inside Write, under mu.
	h.vt = vt.New(spec.Cols, spec.Rows, vt.Options{ScrollbackBytes: spec.ScrollbackBytes, Reply: func(b []byte) {
		if len(h.replies)+len(b) <= 64<<10 {
			h.replies = append(h.replies, b...)
		}
	}})
	lis, err := unixsock.Listen(filepath.Join(dir, SocketName))
	if err != nil {
		return nil, err
	}
	if h.lis, err = unixsock.OwnerOnly(lis); err != nil {
		lis.Close()
		return nil, err
	}
	treeFile := filepath.Join(dir, TreeName)
	cmd := &corral.Cmd{
		Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Cwd,
		Stdin: slave, StdoutFile: slave, StderrFile: slave, Foreground: true,
		Grace: spec.Grace, Isolation: spec.Isolation,
		OnStart: func(id corral.Identity) error { return writeJSONFile(treeFile, id) },
	}
	if h.tree, err = cmd.Start(context.Background()); err != nil {
		h.lis.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Path, err)
	}
	h.status.Tree = h.tree.Identity()
	// Descriptor 0 lets go of the slave, so that once the tree has
	// settled the holder's own copy (closed then) is the last and the
	// reader sees the end of the output at once.
	if err := releaseStdin(); err != nil {
		fmt.Fprintf(os.Stderr, "holder: %v\n", err)
	}
	return h, nil
}

// serve runs the session until it is closed (a close request, SIGTERM).
func (h *holder) serve() {
	sigs := make(chan os.Signal, 1)
	// SIGHUP is dropped: nothing outside may hang the holder up.
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	readDone := make(chan struct{})
	h.out.init()
	h.wg.Add(5)
	go func() { defer h.wg.Done(); defer close(readDone); h.readPTY() }()
	go func() { defer h.wg.Done(); h.feed() }()
	go func() { defer h.wg.Done(); h.writeInput() }()
	go func() { defer h.wg.Done(); h.accept() }()
	go func() { defer h.wg.Done(); h.awaitTree(readDone) }()
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGHUP {
				continue
			}
			h.stop()
		case <-h.quit:
			return
		}
	}
}

// stop asks for the end: the tree is stopped, and quit is closed once it
// has settled.
func (h *holder) stop() {
	h.tree.Stop(h.spec.Grace)
	<-h.exited
	h.quitOnce.Do(func() { close(h.quit) })
}

// finish closes everything after quit and waits for every goroutine.
func (h *holder) finish() error {
	h.tree.Stop(h.spec.Grace)
	<-h.exited
	h.lis.Close()
	h.mu.Lock()
	for c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.master.Close()
	h.wg.Wait()
	os.Remove(filepath.Join(h.spec.Dir, SocketName))
	os.Remove(filepath.Join(h.spec.Dir, TreeName))
	os.Remove(filepath.Join(h.spec.Dir, HolderName))
	return nil
}

func (h *holder) changedLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// writeInput is the one writer of the PTY's master: clients' input and
// the screen model's answers.
func (h *holder) writeInput() {
	for {
		select {
		case r := <-h.input:
			_, err := h.master.Write(r.b)
			r.done <- err
		case <-h.replyReady:
			h.mu.Lock()
			b := h.replies
			h.replies = nil
			h.mu.Unlock()
			h.master.Write(b)
		case <-h.quit:
			return
		}
	}
}

// send writes b to the program, in order with other input; gone closed
// gives up (b is then dropped if the writer had not taken it).
func (h *holder) send(gone <-chan struct{}, b []byte) error {
	r := inputReq{b: b, done: make(chan error, 1)}
	select {
	case h.input <- r:
	case <-h.exited:
		return errors.New("the program has exited")
	case <-h.quit:
		return errors.New("the session is closing")
	case <-gone:
		return errors.New("the client went away")
	}
	select {
	case err := <-r.done:
		return err
	case <-h.quit:
		return errors.New("the session is closing")
	case <-gone:
		return errors.New("the client went away")
	}
}

// awaitTree learns how the program's tree ended, reads what is left of
// its output, and tells waiters and attached clients.
func (h *holder) awaitTree(readDone <-chan struct{}) {
	res, err := h.tree.Wait()
	// The tree has settled: the holder's copy is the last one of the
	// slave, so the reader sees the end of the output next.
	h.slave.Close()
	select {
	case <-readDone:
	case <-time.After(exitDrain):
		h.master.SetReadDeadline(time.Now())
	}
	h.mu.Lock()
	h.catchUpLocked(nil)
	h.status.Exited = true
	h.status.ExitCode, h.status.Signal, h.status.Outcome = res.ExitCode, res.Signal, string(res.Outcome)
	if err != nil && res.Error != "" {
		h.status.Error = res.Error
	}
	h.out.mu.Lock()
	for c := range h.out.clients {
		c.end(h.status)
	}
	h.out.mu.Unlock()
	h.changedLocked()
	h.mu.Unlock()
	close(h.exited)
}

func (h *holder) accept() {
	var delay time.Duration
	for {
		conn, err := h.lis.Accept()
		if err != nil {
			// Out of descriptors (a client that opens connections
			// without end) passes: wait and accept again, as net/http
			// does. Only the listener's close ends the loop.
			if errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
				continue
			case <-h.quit:
				return
			}
		}
		delay = 0
		h.mu.Lock()
		h.conns[conn] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.handle(conn)
			h.mu.Lock()
			delete(h.conns, conn)
			h.mu.Unlock()
			conn.Close()
		}()
	}
}

func (h *holder) handle(conn net.Conn) {
	r := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, p, err := ReadFrame(r, nil)
	if err != nil {
		return
	}
	conn.SetReadDeadline(time.Time{})
	var req Request
	if typ != FrameRequest {
		WriteJSON(conn, FrameAnswer, Answer{Error: fmt.Sprintf("the first frame must be a request, not %q", typ)})
		return
	}
	if err := json.Unmarshal(p, &req); err != nil {
		WriteJSON(conn, FrameAnswer, Answer{Error: fmt.Sprintf("bad request: %v", err)})
		return
	}
	// An answer that its client does not read within answerBound is
	// given up: the connection is closed, and with it goes what the
	// answer held (a whole scrollback).
	answer := func(a Answer) {
		conn.SetWriteDeadline(time.Now().Add(answerBound))
		WriteJSON(conn, FrameAnswer, a)
	}
	switch req.Op {
	case "attach":
		h.attach(conn, r, &req)
	case "send":
		// A client that goes away gives up its input if the program has
		// not taken it yet (a program that reads nothing would otherwise
		// keep every abandoned send, data and goroutine).
		gone := make(chan struct{})
		go func() { r.ReadByte(); close(gone) }()
		a := Answer{}
		if err := h.send(gone, req.Data); err != nil {
			a.Error = err.Error()
		}
		answer(a)
		conn.Close()
		<-gone
	case "screen":
		answer(Answer{Screen: h.screen(&req)})
	case "wait":
		// A client that goes away ends its wait: the goroutine that
		// notices ends when the connection closes, here.
		gone := make(chan struct{})
		go func() { r.ReadByte(); close(gone) }()
		answer(h.wait(gone, req.Wait))
		conn.Close()
		<-gone
	case "resize":
		a := Answer{}
		if err := h.resize(req.Size); err != nil {
			a.Error = err.Error()
		}
		answer(a)
	case "status":
		st := h.snapshot()
		answer(Answer{Status: &st})
	case "close":
		h.tree.Stop(h.spec.Grace)
		<-h.exited
		st := h.snapshot()
		answer(Answer{Status: &st})
		h.quitOnce.Do(func() { close(h.quit) })
	default:
		answer(Answer{Error: fmt.Sprintf("unknown request %q (attach, send, screen, wait, resize, status, close)", req.Op)})
	}
}

func (h *holder) snapshot() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status
}

func (h *holder) screen(req *Request) *Screen {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.catchUpLocked(nil)
	modes := h.vt.Modes()
	// The title is the program's to choose: without its control
	// characters (C1 as UTF-8, DEL), a caller may print it.
	s := &Screen{Status: h.status, Title: strings.Map(dropControl, h.vt.Title()), AltScreen: modes.AltScreen, AppCursor: modes.CursorKeys}
	s.Cols, s.Rows = h.vt.Size()
	s.CursorX, s.CursorY, s.CursorVisible = h.vt.Cursor()
	if req.ANSI {
		s.Text = h.vt.ANSI()
	} else {
		s.Text = h.vt.Text()
	}
	if req.Scrollback != 0 {
		s.Scrollback = h.vt.Scrollback(req.Scrollback, req.ANSI)
	}
	return s
}

func (h *holder) resize(sz Size) error {
	if err := term.CheckSize(sz.Cols, sz.Rows); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.catchUpLocked(nil)
	if c, r := h.vt.Size(); c == sz.Cols && r == sz.Rows {
		return nil
	}
	// The screen model first: the program redraws for the new size on
	// the SIGWINCH the kernel sends when the PTY's size changes.
	h.vt.Resize(sz.Cols, sz.Rows)
	h.changedLocked()
	return term.SetSize(h.master, sz.Cols, sz.Rows)
}

// wait answers when spec's condition holds, on its timeout, or when the
// client goes away (then with nothing).
func (h *holder) wait(gone <-chan struct{}, spec WaitSpec) Answer {
	var re *regexp.Regexp
	if spec.Text != "" {
		var err error
		if re, err = regexp.Compile("(?m)" + spec.Text); err != nil {
			return Answer{Error: fmt.Sprintf("wait: bad text pattern: %v", err)}
		}
	}
	if re == nil && spec.Idle <= 0 && !spec.Exit {
		return Answer{Error: "wait: give text, idle or exit"}
	}
	var timeout <-chan time.Time
	if spec.Timeout > 0 {
		tm := time.NewTimer(spec.Timeout)
		defer tm.Stop()
		timeout = tm.C
	}
	for {
		h.mu.Lock()
		st := h.status
		var text string
		if re != nil {
			h.catchUpLocked(nil)
			text = h.vt.Text()
		}
		quiet := time.Since(h.lastOutput)
		ch := h.changed
		h.mu.Unlock()
		// The pattern is matched outside mu: one that costs much (a
		// caller's choice) slows this wait, not the session.
		if re != nil {
			if loc := re.FindStringIndex(text); loc != nil {
				return Answer{Reason: "text", Match: text[loc[0]:loc[1]], Status: &st}
			}
		}
		if spec.Exit && st.Exited {
			return Answer{Reason: "exit", Status: &st}
		}
		if spec.Idle > 0 && quiet >= spec.Idle {
			return Answer{Reason: "idle", Status: &st}
		}
		// One idle timer per pass, stopped before the next: a deferred
		// stop would keep one per screen change until the wait ends.
		var idle <-chan time.Time
		var itm *time.Timer
		if spec.Idle > 0 {
			itm = time.NewTimer(spec.Idle - quiet)
			idle = itm.C
		}
		var a *Answer
		select {
		case <-ch:
		case <-idle:
		case <-timeout:
			st := h.snapshot()
			a = &Answer{Reason: "timeout", Status: &st}
		case <-gone:
			a = &Answer{}
		case <-h.quit:
			a = &Answer{Error: "the session is closing"}
		}
		if itm != nil {
			itm.Stop()
		}
		if a != nil {
			return *a
		}
	}
}

func dropControl(r rune) rune {
	if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
		return -1
	}
	return r
}

// writeJSONFile writes v to path durably: a temporary file, fsynced and
// renamed over path.
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|oNoFollow, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record %s: %w", path, err)
	}
	return nil
}

// writeSelf records the holder's own identity (pid, start time, boot),
// for a new owner to check before it trusts or signals the holder.
func writeSelf(path string) error {
	id := corral.Identity{Isolation: corral.IsolationPgroup, Pid: os.Getpid(), Pgid: os.Getpid()}
	id.StartTime, id.BootID = selfStart()
	return writeJSONFile(path, id)
}
