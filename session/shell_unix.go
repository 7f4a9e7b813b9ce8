//go:build unix

package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-dev/corral"
)

// errUnusable is returned by shell.exec when the shell was gone before the
// command was handed to it.
var errUnusable = errors.New("shell gone before the command was submitted")

// testHookNonce, set by tests, sees each command's nonce.
var testHookNonce func(nonce string)

// startupBound bounds the wait for a new shell's first answer.
const startupBound = 10 * time.Second

func lookShell(sh string) (string, error) {
	p, err := exec.LookPath(sh)
	if err != nil {
		return "", fmt.Errorf("session: shell %q: %w", sh, corral.ErrNotFound)
	}
	return p, nil
}

// shellArgv makes the shell read its commands from descriptor 3 and skip
// every startup file (no rc noise, no prompt).
func shellArgv(path string) []string {
	switch filepath.Base(path) {
	case "bash":
		return []string{"bash", "--noprofile", "--norc", "/dev/fd/3"}
	case "zsh":
		return []string{"zsh", "-f", "/dev/fd/3"}
	}
	// The channel is sourced by sh -c, so that $0 (and the name the
	// shell's messages start with) is the shell's, as in sh -c CODE, not
	// /dev/fd/3.
	base := filepath.Base(path)
	return []string{base, "-c", ". /dev/fd/3", base}
}

// shell is one running shell process and the goroutines that read its
// stdout and stderr.
type shell struct {
	cfg      *Config
	tree     *corral.Tree
	ctl      *os.File    // our end of the shell's descriptor 3
	streams  [2]*os.File // our ends of its stdout and stderr
	writers  [2]*os.File // held: our write ends of them (see shellEnds)
	eof      [2]chan struct{}
	dead     atomic.Bool
	closing  atomic.Bool // the session is being closed
	stopOnce sync.Once
	stopErr  error
	detached chan struct{} // closed when the owner lets the shell go
	detachMu sync.Once
	fifos    Fifos // a held shell's FIFOs, as made for it
	proto    protocol

	// xtrace, verbose: the last command left xtrace or verbose on (its
	// function turned them off); evalFn: it defined a function named
	// eval. Only the holder of the session's turn uses them.
	xtrace, verbose, evalFn bool
	// endClosed2: the last command line's call of F ran with the
	// shell's stderr closed (xtrace's brace group, commandLineS).
	endClosed2 bool
	// status is the last command's exit status, the next one's $?;
	// stdinSet: the last command's stdin was a FIFO, still the shell's.
	status   int
	stdinSet bool
	execFn   bool // the last command left a function named exec (bash)
	// functrace: the last command left set -T on; flagsKnown: the shell
	// has reported its flags (see exec).
	functrace, flagsKnown bool
	// code: our end of the file the shell sources each command from
	// (writeCode), at codePath; codeClosed: the shell is stopped or let
	// go.
	codeMu     sync.Mutex
	code       *os.File
	codePath   string
	codeClosed bool
	// pipes: the last command's own stdout and stderr FIFOs;
	// lastMerged: it had its stderr sent to its stdout FIFO by corral
	// (fdKinds). streamIDs: the session's own output pipes.
	pipes      [2]*cmdPipe
	lastMerged bool
	streamIDs  [2]FileID
	// pipeSeq numbers the FIFOs the shell makes (newCmdPipe); procSees:
	// /proc shows the shell's descriptors (fdKinds looked once,
	// procLooked). Only the command running uses them.
	pipeSeq              uint64
	procLooked, procSees bool
	// outMu[i] orders what stream i's session pipe and command FIFO
	// hand to a sink (cmdpipe_unix.go).
	outMu [2]sync.Mutex

	// mu guards the fields that follow.
	mu sync.Mutex
	// ours: the session's pipes, by what they are (0: stdout, 1:
	// stderr); live: the commands' FIFOs whose readers run.
	ours map[FileID]int
	live map[*cmdPipe]struct{}
	// free: FIFOs kept for later commands, by stream (takeFree);
	// noFree: the shell is stopped or let go, nothing more is kept.
	free      [2][]*cmdPipe
	noFree    bool
	cur       *sink // the running command's sink, nil between commands
	cwd       string
	env       []string
	haveState bool
}

func startShell(ctx context.Context, cfg *Config) (*shell, error) {
	path, err := lookShell(cfg.Shell)
	if err != nil {
		return nil, err
	}
	var ends *shellEnds
	var fifos Fifos
	if cfg.HoldDir != "" {
		ends, fifos, err = makeHeld(cfg.HoldDir)
	} else {
		ends, err = makePipes()
	}
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	env := withoutStartupHooks(cfg.Env)
	if env == nil {
		env = []string{} // not nil: that would be this process's
	}
	c := &corral.Cmd{
		Path: path, Args: shellArgv(path), Env: env, Dir: cfg.Dir,
		StdoutFile: ends.theirs[0], StderrFile: ends.theirs[1],
		ExtraFiles: markerFiles(ends),
		Isolation:  cfg.Isolation, Grace: cfg.Grace, Drain: cfg.Drain,
		MemoryMax: cfg.Limits.MemoryMax, MemoryHigh: cfg.Limits.MemoryHigh, CPUs: cfg.Limits.CPUs, PidsMax: cfg.Limits.PidsMax,
	}
	switch {
	case cfg.OnHeld != nil && cfg.HoldDir != "":
		c.OnStart = func(id corral.Identity) error { return cfg.OnHeld(id, fifos) }
	case cfg.OnStart != nil:
		c.OnStart = cfg.OnStart
	}
	// The shell's tree lives until the session lets it go: no context of
	// a command's bounds it.
	tree, err := c.Start(context.Background())
	ends.closeTheirs()
	if err != nil {
		ends.closeOurs()
		var re *corral.RunError
		if errors.As(err, &re) && re.Err != nil {
			err = re.Err // classified by Start; its result is not this command's
		}
		return nil, fmt.Errorf("session: start %s: %w", cfg.Shell, err)
	}
	sh := newShell(cfg, tree, ends)
	sh.fifos = fifos
	prelude := sh.proto.prelude(cfg.HoldDir != "")
	if cfg.Umask != nil {
		// Before any command; not sent again on Attach, which keeps
		// whatever umask the shell has.
		prelude += fmt.Sprintf("umask %04o\n", *cfg.Umask&0o777)
	}
	if _, err := sh.ctl.Write([]byte(prelude)); err != nil {
		sh.stop(-1)
		return nil, fmt.Errorf("session: shell %s did not start: %w", cfg.Shell, err)
	}
	var errb bytes.Buffer
	sctx, cancel := context.WithTimeout(ctx, startupBound)
	defer cancel()
	res, err := sh.exec(sctx, "", Options{Stderr: &limitedBuffer{b: &errb, max: 4096}}, "")
	if err != nil {
		sh.stop(-1)
		return nil, fmt.Errorf("session: shell %s did not start (%s): %s", cfg.Shell, res.Outcome, strings.TrimSpace(errb.String()))
	}
	return sh, nil
}

// The descriptors on which every shell holds a copy of its stdout and
// stderr as the session made them, for corral's markers (see markOut in
// the comment on the protocol). Above what exec {fd} hands out (the lowest
// free from 10) and below a held bash's channel (heldChannelFd) and bash's
// own 255; dash cannot name a descriptor above 9 at all.
const (
	markOutFd = 252
	markErrFd = 253
)

// markerFiles is the shell's descriptors from 3 on: its command channel
// on 3, its stdout and stderr again on markOutFd and markErrFd, and
// nothing between (a nil entry is a closed descriptor in the child).
func markerFiles(ends *shellEnds) []*os.File {
	files := make([]*os.File, markErrFd-2)
	files[0] = ends.theirs[2]
	files[markOutFd-3], files[markErrFd-3] = ends.theirs[0], ends.theirs[1]
	return files
}

// shellEnds are the shell's command channel and output streams: the
// descriptors the shell gets (stdout, stderr, 3) and ours (the writing end
// of its channel, the reading ends of its output).
type shellEnds struct {
	theirs  [3]*os.File
	ctl     *os.File
	streams [2]*os.File
	// writers: a held session's own write ends of its output FIFOs, so
	// that they have a writer while we read them even when a command has
	// moved the shell's stdout or stderr elsewhere (exec >file): without
	// one, each marker written by path would end with end of file.
	writers [2]*os.File
}

func (e *shellEnds) closeTheirs() {
	for _, f := range e.theirs {
		if f != nil {
			f.Close()
		}
	}
}

func (e *shellEnds) closeOurs() {
	for _, f := range []*os.File{e.ctl, e.streams[0], e.streams[1], e.writers[0], e.writers[1]} {
		if f != nil {
			f.Close()
		}
	}
}

// makePipes makes the ends of a session that lives and dies with us.
func makePipes() (*shellEnds, error) {
	e := &shellEnds{}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	e.theirs[2], e.ctl = r, w
	for i := range e.streams {
		if r, w, err = os.Pipe(); err != nil {
			e.closeTheirs()
			e.closeOurs()
			return nil, err
		}
		e.streams[i], e.theirs[i] = r, w
	}
	return e, nil
}

func newShell(cfg *Config, tree *corral.Tree, ends *shellEnds) *shell {
	sh := &shell{
		cfg: cfg, tree: tree, ctl: ends.ctl, streams: ends.streams, writers: ends.writers,
		proto:    protoFor(cfg.Shell, cfg.fifoDir),
		eof:      [2]chan struct{}{make(chan struct{}), make(chan struct{})},
		detached: make(chan struct{}),
		live:     map[*cmdPipe]struct{}{},
	}
	for i, f := range ends.streams {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err == nil {
			sh.streamIDs[i] = idOf(&st)
		}
	}
	sh.ours = map[FileID]int{sh.streamIDs[0]: 0, sh.streamIDs[1]: 1}
	go sh.readStream(0)
	go sh.readStream(1)
	return sh
}

// markClosing says the session is closing: a command that sees the shell
// die now ends as cancelled, not as the shell's death.
func (sh *shell) markClosing() { sh.closing.Store(true) }

func (sh *shell) pid() int     { return sh.tree.Identity().Pid }
func (sh *shell) isDead() bool { return sh.dead.Load() || sh.rootExited() }
func (sh *shell) rootExited() bool {
	select {
	case <-sh.tree.Exited():
		return true
	default:
		return false
	}
}

func (sh *shell) lastState() (cwd string, env []string, ok bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.cwd, sh.env, sh.haveState
}

// readBufs are the buffers output is read into. A reader takes one only
// once its stream is readable, so an idle session holds none.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// readStream hands what the shell writes on stdout (i=0) or stderr (i=1)
// to the running command's sink; output between commands is dropped.
func (sh *shell) readStream(i int) {
	defer close(sh.eof[i])
	rc, err := sh.streams[i].SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		var bp *[]byte
		err := rc.Read(func(fd uintptr) bool {
			bp = readBufs.Get().(*[]byte)
			for {
				n, rerr = syscall.Read(int(fd), *bp)
				if rerr != syscall.EINTR {
					break
				}
			}
			if rerr == syscall.EAGAIN {
				readBufs.Put(bp) // parked until readable, holding nothing
				bp = nil
				return false
			}
			return true
		})
		if bp == nil {
			return // closed or cut off while parked
		}
		if n > 0 {
			at := time.Now()
			sh.mu.Lock()
			k := sh.cur
			sh.mu.Unlock()
			if k != nil {
				// What the command's own FIFO holds was written before
				// this (a marker, a trace): it goes first.
				sh.outMu[i].Lock()
				sh.drain(i, k)
				k.feed(i, (*bp)[:n], at)
				sh.outMu[i].Unlock()
			}
		}
		readBufs.Put(bp)
		if err != nil || rerr != nil || n == 0 {
			return // closed, cut off by a deadline, or end of file
		}
	}
}

// The protocol. A new shell, and a shell taken over by Attach (whose
// owner may have died before sending it), is first sent a prelude that
// defines two functions, whose name is drawn at random for each shell (so
// no command can guess it, define it, unset it or alias it; bash also
// makes them read-only):
//
//	F NONCE RC    and    Fe NONCE RC
//
// which write "\037corral:NONCE RC FLAGS PWD\0" on the session's stdout
// (followed, for Fe, by the output of export -p and "\0") and
// "\037corral:NONCE RC\037" on its stderr. FLAGS is the shell's $-.
// Both go through the shell's own copies of the stdout and stderr the
// session gave it (descriptors markOutFd and markErrFd, given to it at
// start), never through descriptors 1 and 2 nor a path: a command may move
// 1 and 2 (exec >file, exec 1>&2, exec 2>&1, exec 2>&-), as a script may,
// and its output then goes where it sent it while the markers still reach
// corral, so nothing of corral's lands in the user's file and the command
// ends with its own status; and a command that replaces the FIFOs' names
// in a held session's directory (a symbolic or hard link to another
// session's FIFO, or to a file elsewhere) changes nothing, since no name
// is opened (dash opens /dev/fd/N, the descriptor's own pipe). The nonce marks where the
// command's output ends on each stream; the exit status is on both, so a
// command that closed one of them still has a known status.
//
// Every name F uses at run time is called so that a command cannot
// redefine it: F's body is parsed when the prelude is read, so no alias a
// command defines later reaches it; bash and zsh call every builtin
// through "builtin" (a function named printf or export is then skipped),
// POSIX shells through "command" or as special builtins, which dash does
// not let a function shadow. bash lets a command define a function named
// eval, which would make the shell pass every later command to it: F
// reports such a function (declare -F prints its name before PWD), the
// next command's line removes it first, and the result says so. What
// remains is a function named builtin (bash) or command (POSIX shells):
// then F does not answer, and exec sees the shell wait for input with no
// answer given (waitingForInput), as after set -n.
//
// A command is two lines:
//
//	[Fs N||] [\exec <'FIFO';] \eval 'CODE' [3<&-]
//	F NONCE $?
//
// (Fs N: after a command that ended with status N, so that $? is N when
// the code starts; the exec: when the command has stdin, see
// commandLineS; 3<&-: dash's held shells, see below)
// or, when the last command left xtrace on, with "'set -x;' " before the
// code and the second line "{ F NONCE $?;} 2>&-"; when it left
// verbose on, the code's word starts with "set -v" (or "set -xv") and a
// newline.
//
// In bash (a command with a session directory: not the startup command
// nor a snapshot), the code is not on the line: it is written to a file
// in the session's private directory (codeName, writeCode) and the line
// says "\builtin . FILE" (source) in place of the eval, so that bash counts
// the code's lines from 1 (eval counts on from the channel's line);
// "\builtin set -v;" before it stands for the code's "set -v" line, and
// the file starts with "set -x;" or a "set -xv" line (codeText). source
// sets aside a DEBUG trap for the file it runs unless functrace is on:
// once a command may have set one, the line turns functrace on before the
// source and the file turns it off on its first line (keepsDebug). What
// source changes besides: top-level return ends the command, FUNCNAME and
// BASH_SOURCE name source and the file, caller at top level answers, a
// RETURN trap fires as each command ends, and messages start with the
// file's path.
//
// eval runs the code in the shell itself (so cd and export stick), and
// nothing the code contains (a heredoc, a quote, a syntax error) can reach
// past its single-quoted word; the backslash keeps an alias named eval out.
// The marker has a line of its own because bash throws away the rest of
// the current input line after some errors inside eval (declare -i n;
// n=08, a[1+], exit 1 2). F turns xtrace off, so that corral's own lines
// are not traced: when FLAGS had x, the next command's eval starts with
// "set -x;" (untraced, since xtrace is off when it runs) before the user's
// code, and its marker line is the brace group, which sends what xtrace
// prints for F to nowhere (xtrace prints a command before its own
// redirections are made, a group's contents after the group's), while F
// writes its stderr marker on markErrFd. The group costs
// bash about 5 us and 10 bytes, so it is not used otherwise: a command
// that turns xtrace on itself gets the trace of F's call on stderr before
// the marker, and the sink cuts it there (sink.trace).
// F turns verbose off too, for the same reason: a line is echoed when it
// is read, so the next command's line is read unechoed, and the "set -v"
// line that starts its eval, then each line of the code, are read by
// eval's parser after verbose is on again: bash echoes the code's lines,
// and only those, as a script's. The marker line is read (and echoed)
// after the code, while verbose is on; that echo starts with the trace
// text the sink cuts (sink.trace). The code's first line counts as its
// second in LINENO while verbose is on. dash does not echo what eval
// runs: there F leaves verbose on, dash echoes the whole eval line as it
// reads it, before the code runs, and the sink gives the command the
// code's own lines in its place (echoedLine, sink.echo); what differs
// from a script is only that all of them come before the code's output.
// Lines are short on purpose: bash reads commands from a pipe one byte per
// system call, and the functions' bodies stay straight (a case costs bash
// about 4 us).
//
// What a command can still see or break: with BASH_XTRACEFD set, the
// trace of F's call goes to that descriptor; a PS4 other than the default
// form stays before the cut trace in the command that turned xtrace on;
// an alias named { (bash with expand_aliases, dash always) replaces the
// group's brace, which makes that marker line a syntax error;
// and an xtrace or verbose that F turned off is not turned on again
// after Attach (the new owner does not know it was on). PWD is not trusted: exec checks
// it against /proc (trueCwd).
//
// The nonce: nothing a command can list or read without going into the
// shell itself names it (its stdin FIFO has a name of its own, the
// shell's argv and environment do not carry it:
// TestCommandCannotReadItsNonce). What still shows it: BASH_COMMAND in a
// DEBUG trap and the trace of F's call sent to BASH_XTRACEFD (below), the
// marker line waiting in the channel while the command runs (a child
// reading /proc/$PPID/fd/255 takes it, and the shell's own input with it;
// read <&255 in the shell makes bash 5.2 die of SIGSEGV), and the shell's
// memory. Passing the nonce any other way the shell can read (a here-
// document, which BASH_COMMAND also shows; a second pipe that F reads) is
// open to the same reads, and costs bash a system call per byte: the
// shell and its commands are one process of one user, so the nonce keeps
// output from ending a command by chance, not a command that sets out to.
//
// DEBUG and ERR traps (bash; dash has neither) see corral's lines, and
// this cannot be helped without costing every command a fork. A DEBUG
// trap fires for every simple command read at top level, so it fires for
// the eval (BASH_COMMAND is the eval line) and for F's call (BASH_COMMAND
// holds the nonce, so a DEBUG trap can forge the command's end), besides
// the code's own commands. An ERR trap fires for the failing command, and
// again for the eval, which returns its status. Measured in bash 5.2:
//   - inside a function the DEBUG and ERR traps are reset (trap -p prints
//     nothing; trap - DEBUG there is undone when it returns), unless
//     functrace (set -T, extdebug) or the function's trace attribute
//     (declare -ft) is on, and then the trap also fires on entry and for
//     each of the function's commands: F can neither see nor clear them;
//   - the DEBUG trap fires for the commands of a signal, ERR or EXIT
//     trap's action; PROMPT_COMMAND is never run in a shell that is not
//     interactive; RETURN traps run only for functions that trace and
//     for sourced files, whose "." fires DEBUG itself;
//   - ERR's exemptions (&&, ||, !, if, while) reach into eval, changing
//     set -e and ERR inside the code, so the eval cannot be exempted
//     alone;
//   - the one top-level construct found that runs code without firing
//     DEBUG is a command substitution in the redirection of a compound
//     command ({ f() { :; }; } 8>&$(...), or a process substitution):
//     it forks, about 1 ms against 33 us for a call of F (2000 of each
//     in a loop), for every command, and a DEBUG trap would still fire
//     for the eval; without eval the code would be plain input lines,
//     where a here-document or an unterminated quote eats the marker.
// TestTrapsSeeCorralsLines pins what remains.
//
// No command may read or write the command channel on descriptor 3 (the
// shell reads its commands through a close-on-exec copy of its own). A
// shell we own closes it once, in the prelude (exec 3<&-). A held shell
// must keep a read-write end: it is what keeps the channel from reaching
// end of file when the owner dies. bash moves it, in the prelude, to
// descriptor 254 (heldChannelFd): above what exec {fd} hands out (the lowest
// free from 10) and below bash's own 255, so descriptors 3 and up are
// the command's as in bash -c; what remains is that bash cannot make it
// close-on-exec, so the programs a command starts inherit it, and a
// command that replaces 254 (exec 254>x) leaves the shell to die with its
// owner. dash cannot name a descriptor above 9: each of its commands runs
// with " 3<&-" after the code, so a command has 3 closed and what it opens
// on 3 is undone after it; dash's own copies are on 10 and up, which
// dash's commands cannot name.
//
// The marker descriptors (markOutFd, markErrFd) are the shell's from its
// start, for every shell: no shell can make them close-on-exec, so the
// programs a command starts inherit them too (as they inherit 1 and 2,
// the same pipes); a bash command that replaces or closes one of them
// (exec 252>x) sends its own marker there, or nowhere: the command then
// ends unanswered (waitingForInput), the error says which descriptor it
// took, and the session restarts. dash cannot name them.

// heldChannelFd is the descriptor on which a held bash keeps its channel's
// read-write end.
const heldChannelFd = "254"

// protoFor returns the protocol of the shell at path, with a fresh name
// for its functions.
func protoFor(path, fifoDir string) protocol {
	var b [5]byte
	rand.Read(b[:])
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	name := []byte("_c")
	for _, c := range b {
		name = append(name, letters[int(c)%len(letters)])
	}
	p := protocol{fn: string(name)}
	switch filepath.Base(path) {
	case "bash":
		p.kind = bashProto
		p.dir = fifoDir
	case "zsh":
		p.kind = zshProto
	}
	return p
}

type protoKind int

const (
	posixProto protoKind = iota // dash, ksh, sh: "command" and special builtins
	bashProto                   // "builtin", read-only functions, eval guard
	zshProto                    // "builtin" (zsh's "command" runs no builtin)
)

// protocol is how corral talks to one shell: the kind of shell and the
// name of its functions.
type protocol struct {
	kind protoKind
	fn   string
	// dir, for bash, is the directory of the commands' FIFOs, written
	// into Fo (prelude): "" when there is none.
	dir string
}

// markTo is the redirection that sends a marker to the shell's copy of
// its stdout (fd markOutFd) or stderr (markErrFd): bash names the
// descriptor, POSIX shells and zsh, which take one digit, open it again
// through /dev/fd (the same pipe, whatever the name it was made under
// now is).
func (p protocol) markTo(fd int) string {
	if p.kind == bashProto {
		return ">&" + strconv.Itoa(fd)
	}
	return ">>/dev/fd/" + strconv.Itoa(fd)
}

// prelude is the text that defines the protocol's functions in the shell.
func (p protocol) prelude(held bool) string {
	var b strings.Builder
	switch {
	case !held:
		b.WriteString("exec 3<&-\n")
	case p.kind == bashProto:
		// The channel's read-write end moves out of the command's way
		// (see the end of the comment above on the protocol); sent
		// again on Attach, when 3 is closed already, it does nothing.
		b.WriteString("{ exec " + heldChannelFd + "<&3 3<&-;} 2>/dev/null\n")
	}
	if p.kind == bashProto {
		// $0 is the shell, as in bash -c CODE, not the channel it reads
		// (/dev/fd/3); bash sets $0 from BASH_ARGV0.
		b.WriteString("BASH_ARGV0=bash\n")
	}
	bi, ex := "builtin ", "builtin "
	head := bi + `printf '\037corral:%s %d %s %s\000' "$1" "$2" "$-" "${PWD-}"; `
	switch p.kind {
	case bashProto:
		head = bi + `printf '\037corral:%s %d %s ' "$1" "$2" "$-"; builtin declare -F eval exec; builtin printf '%s\000' "${PWD-}"; `
	case posixProto:
		bi, ex = "command ", ""
		head = bi + `printf '\037corral:%s %d %s %s\000' "$1" "$2" "$-" "${PWD-}"; `
	}
	off := "set +xv; "
	if p.kind == posixProto {
		off = "set +x; " // dash's verbose stays on: see echoedLine
	}
	errMark := bi + `printf '\037corral:%s %d\037' "$1" "$2" ` + p.markTo(markErrFd) + "; "
	envHead := head + ex + "export -p; " + bi + `printf '\000'; `
	// The braces are syntax: no command can redefine them.
	head = "{ " + head + "} " + p.markTo(markOutFd) + "; "
	envHead = "{ " + envHead + "} " + p.markTo(markOutFd) + "; "
	tail := ex + off + errMark + "}\n"
	first := ""
	if p.kind == posixProto {
		// A function named command would take every call F makes
		// through it (dash lets no function shadow unset, a special
		// builtin): it lasts until its command's end.
		first = "unset -f command; "
	}
	b.WriteString(p.fn + "() { " + first + head + tail)
	b.WriteString(p.fn + "e() { " + first + envHead + tail)
	b.WriteString(p.fn + "s() { " + ex + `return "$1"; }` + "\n")
	if p.kind == bashProto && p.dir != "" {
		// Fo O E T gives the shell's descriptors 1 and 2 the command's
		// FIFOs named O and E in dir ("-": left as they are) and turns
		// functrace on if T is "T" (keepsDebug): bash reads its
		// command line a byte per system call, and the FIFOs' paths and
		// the set on the line were most of it (about 100 of 190 bytes).
		// case is syntax, and builtin is bash's: no command can redefine
		// them. The exec must be exec itself (builtin exec would undo its
		// redirections when it returns, as for any builtin's): a
		// function named exec would take it, so after a command that left
		// one (execFn) the line does without Fo.
		d := quote(p.dir + "/")
		b.WriteString(p.fn + "o() { case $1 in -) ;; *) \\exec 1<>" + d + `"$1";; esac; ` +
			"case $2 in -) ;; *) \\exec 2<>" + d + `"$2";; esac; ` +
			"case $3 in T) builtin set -T;; esac; }\n")
	}
	if p.kind == bashProto {
		fns := p.fn + " " + p.fn + "e " + p.fn + "s"
		if p.dir != "" {
			fns += " " + p.fn + "o"
		}
		b.WriteString("builtin readonly -f " + fns + "\n")
	}
	return b.String()
}

// commandLine is the two lines handed to the shell for a command; xtrace
// says the last command left xtrace on, unsetEval that it defined a
// function named eval.
func (p protocol) commandLine(code, nonce, stdin string, trackEnv, held, xtrace, unsetEval bool) string {
	return p.commandLineV(code, nonce, stdin, trackEnv, held, xtrace, false, unsetEval)
}

// commandLineV is commandLine, with verbose saying that the last command
// left verbose on.
func (p protocol) commandLineV(code, nonce, stdin string, trackEnv, held, xtrace, verbose, unsetEval bool) string {
	return p.commandLineS(code, nonce, stdin, trackEnv, held, xtrace, verbose, unsetEval, 0, false, false, false, "", "", false)
}

// commandLineS is commandLineV, with status the last command's exit
// status, which this command's code finds in $?. After a status of 0
// nothing is needed (the last command of the shell was F's printf); after
// another, the eval follows "Fs N||": a function that returns N, whose
// failure, left of ||, is neither set -e's nor an ERR trap's. It costs
// bash about 12 bytes of reading (a system call each), so only commands
// that follow a failure pay it, and a DEBUG trap fires once more for them,
// before the code.
//
// A command's stdin is opened by an exec of its own before the eval, not
// by a redirection of the eval: a shell saves the descriptor a builtin's
// redirection replaces on one of 10 and up (bash takes the lowest free
// one, the one exec {fd} would hand out) for the time the builtin runs,
// and that descriptor is then not the command's (exec 10>&1 fails, {fd}
// gives 11). The next command that has no stdin of its own starts with
// "exec </dev/null;" (nullStdin), the shell's stdin as it was started.
//
// In bash a function named exec (execFn: F reported one) would take that
// exec: then the stdin is a redirection of the eval, as it was before
// (its saved descriptor takes 10 while the command runs), and the next
// command keeps the spent FIFO as its stdin (end of file, as /dev/null).
//
// merged (the caller gave one writer for stdout and stderr) sends the
// code's stderr to its stdout, so that what it wrote arrives in the order it
// wrote it: a redirection of the eval, which, as for a function named
// exec, takes descriptor 10 while the command runs.
//
// outs is the redirection that gives the code its own stdout and stderr
// (outRedirs), made by the same exec.
//
// src, when not "" (bash), is the file that holds the code as codeText
// made it: the line sources it instead of evaluating the code (see
// codeName); keepDebug turns functrace on for it (keepsDebug).
//
// fo, when given, is Fo's arguments (prelude, foArgs): the call of Fo
// gives the command its FIFOs and functrace in place of outs and set -T
// (bash with a code file, no function named exec).
func (p protocol) commandLineS(code, nonce, stdin string, trackEnv, held, xtrace, verbose, unsetEval bool, status int, nullStdin, execFn, merged bool, outs, src string, keepDebug bool, fo ...string) string {
	var b strings.Builder
	b.Grow(len(code) + 56 + len(p.fn) + len(stdin) + len(outs))
	if unsetEval {
		b.WriteString("\\builtin unset -f eval;")
	}
	redirStdin := execFn && p.kind != posixProto // dash lets no function shadow exec
	in := ""
	switch {
	case redirStdin:
	case stdin != "":
		in = "<" + quote(stdin)
	case nullStdin:
		in = "</dev/null"
	}
	if len(fo) == 2 && src != "" && !redirStdin {
		b.WriteString(p.fn + "o " + fo[0] + " " + fo[1])
		if keepDebug {
			b.WriteString(" T;")
		} else {
			b.WriteString(" -;")
		}
		outs, keepDebug = "", false
	}
	if !redirStdin && (in != "" || outs != "") {
		b.WriteString("\\exec ")
		b.WriteString(in)
		if in != "" && outs != "" {
			b.WriteByte(' ')
		}
		b.WriteString(outs)
		b.WriteString(";")
	}
	if src != "" && keepDebug {
		b.WriteString("\\builtin set -T;")
	}
	if src != "" && verbose && !xtrace {
		// Before the file is read, so that bash echoes each of its
		// lines; before Fs, which sets $?.
		b.WriteString("\\builtin set -v;")
	}
	if status > 0 && status < 256 {
		b.WriteString(p.fn + "s " + strconv.Itoa(status) + "||")
	}
	if src != "" {
		// "." and no quotes when none are needed: bash reads the line a
		// byte per system call.
		b.WriteString("\\builtin . ")
		b.WriteString(quoteIfNeeded(src))
	} else {
		b.WriteString("\\eval ")
	}
	if p.kind == posixProto {
		verbose = false // still on: the shell echoes this line (echoedLine)
	}
	switch {
	case src != "":
	case verbose && xtrace:
		b.WriteString(quote("set -xv\n" + code))
	case verbose:
		b.WriteString(quote("set -v\n" + code))
	case xtrace:
		b.WriteString("'set -x;' ")
		b.WriteString(quote(code))
	default:
		b.WriteString(quote(code))
	}
	if merged {
		b.WriteString(" 2>&1")
	}
	if redirStdin && stdin != "" {
		b.WriteString(" <")
		b.WriteString(quote(stdin))
	}
	if redirStdin && outs != "" {
		b.WriteString(" ")
		b.WriteString(outs)
	}
	if held && p.kind != bashProto {
		b.WriteString(" 3<&-")
	}
	b.WriteString("\n")
	if xtrace {
		b.WriteString("{ ")
	}
	b.WriteString(p.call(trackEnv))
	b.WriteString(" ")
	b.WriteString(nonce)
	if xtrace {
		b.WriteString(" $?;} 2>&-\n")
	} else {
		b.WriteString(" $?\n")
	}
	return b.String()
}

// echoedLine is what a POSIX shell under set -v echoes of a command
// line as it reads it (its eval line, up to the marker line), and what
// the sink gives the command in its place: the code's own lines. dash
// does not echo what eval runs, so its verbose stays on between commands
// and the echo of corral's line is replaced; the code's lines are then
// all echoed before it runs, not each as it is reached.
func echoedLine(line, code string) (echo, as []byte) {
	end := strings.LastIndexByte(strings.TrimSuffix(line, "\n"), '\n') + 1
	as = []byte(code)
	if len(code) > 0 && !strings.HasSuffix(code, "\n") {
		as = append(as, '\n')
	}
	return []byte(line[:end]), as
}

// call is the name of the function that ends a command.
func (p protocol) call(trackEnv bool) string {
	if trackEnv {
		return p.fn + "e"
	}
	return p.fn
}

// quoteIfNeeded is s as one shell word: itself when it holds only
// characters no shell treats specially, else quoted.
func quoteIfNeeded(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("/._-+,", c) >= 0) {
			return quote(s)
		}
	}
	if s == "" {
		return "''"
	}
	return s
}

// quote makes s one single-quoted shell word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// codeName is the file, in the session's private directory, from which
// a bash session's shell sources each command's code. bash counts a
// sourced file's lines from 1, as bash -c counts its string's, where eval
// counts on from the line of the channel it was read on; the file's path
// is what bash's messages start with (PATH: line N:) and what BASH_SOURCE
// holds. The file never holds the nonce, and its name is fixed.
const codeName = "cmd"

// codeText is what the code file holds for a command: the code, after
// "set -x;" on its first line when the last command left xtrace on (run
// while xtrace is still off, so untraced; the line numbers stay the
// code's), or after a line of its own, "set -xv", when it left both on
// (verbose is off while that line is read, so it is not echoed; the
// code's lines then count from 2). Verbose alone is turned on by the
// command's line, before the file is read (commandLineS).
//
// untrace: the command's line turned functrace on (set -T) so that source
// keeps a DEBUG trap set by an earlier command (bash's source sets the
// DEBUG trap aside for the file it reads unless functrace is on, and puts
// it back after); the file turns it off again before the code, on the
// same line.
//
// status, when not "", is the call that gives the code the last command's
// exit status as $? (Fs N||, see commandLineS), after set +T, which would
// clear it.
func codeText(code string, xtrace, verbose, untrace bool, status string) string {
	switch {
	case xtrace && verbose && untrace:
		return "\\builtin set +T -xv\n" + code
	case xtrace && verbose:
		return "\\builtin set -xv\n" + code
	case xtrace && untrace:
		return "\\builtin set +T -x;" + code
	case xtrace:
		return "\\builtin set -x;" + code
	case untrace:
		return "\\builtin set +T;" + status + code
	}
	return code
}

// keepsDebug says whether a command's line turns functrace on for its
// file (codeText's untrace), so that a DEBUG trap keeps firing in it: when
// functrace is off, and not under verbose alone (the file's first line,
// where it would be turned off, is echoed). A trap may be set without
// the command naming it (a file it sources, as bash-preexec does), and
// inside F (a function without functrace) trap -p does not show it, so
// every command pays it: about 15 us (a set on the line, read a byte per
// system call, and one in the file).
func keepsDebug(functrace, xtrace, verbose bool) bool {
	return !functrace && (xtrace || !verbose)
}

// hasCommands says whether code holds anything but blank lines and
// comments: what follows "Fs N||" in a file must (codeText).
func hasCommands(code string) bool {
	for _, l := range strings.Split(code, "\n") {
		if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
			return true
		}
	}
	return false
}

// writeCode puts text in the code file at path. The file is made afresh
// once for each shell (a name a command replaced, with a link or anything
// else, is removed first and never followed; private to this user) and
// kept open: each command's code is written over it in place (pwrite and
// ftruncate, about 8 us; making it anew costs a journalled filesystem
// 120 us and more, truncating it to 0 more still), into the file we made
// whatever the name now is.
func (sh *shell) writeCode(path, text string) error {
	sh.codeMu.Lock()
	defer sh.codeMu.Unlock()
	if sh.codeClosed {
		return errShellGone
	}
	if sh.code != nil && sh.codePath != path {
		sh.code.Close()
		sh.code = nil
	}
	if sh.code == nil {
		syscall.Unlink(path)
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return &os.PathError{Op: "create", Path: path, Err: err}
		}
		sh.code, sh.codePath = os.NewFile(uintptr(fd), path), path
	}
	b := []byte(text)
	fd := int(sh.code.Fd())
	var err error
	for off := 0; off < len(b) && err == nil; {
		var n int
		if n, err = syscall.Pwrite(fd, b[off:], int64(off)); err == nil {
			off += n
		} else if err == syscall.EINTR {
			err = nil
		}
	}
	if err == nil {
		err = syscall.Ftruncate(fd, int64(len(b)))
	}
	if err != nil {
		sh.code.Close()
		sh.code = nil
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// closeCode closes our end of the code file (its name stays, for the
// shell's next owner or the session's removal to take).
func (sh *shell) closeCode() {
	sh.codeMu.Lock()
	defer sh.codeMu.Unlock()
	sh.codeClosed = true
	if sh.code != nil {
		sh.code.Close()
		sh.code = nil
	}
}

// newNonce returns 72 random bits as 12 base64url characters (safe
// unquoted in a shell word): a command cannot guess the nonce that ends it,
// and output cannot contain it by chance.
func newNonce() string {
	var b [9]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// exec runs one command. dir is the directory for a stdin FIFO ("" only for
// the startup command, which has no stdin).
func (sh *shell) exec(ctx context.Context, code string, opts Options, dir string) (*corral.Result, error) {
	res := corral.NewResult(sh.tree.Identity())
	if sh.isDead() {
		res, _ = corral.StartFailed(res, errShellGone)
		return res, errUnusable
	}
	nonce := newNonce()
	if testHookNonce != nil {
		testHookNonce(nonce)
	}
	res.StartedAt = time.Now()
	track := sh.cfg.TrackEnv || opts.snapshot
	k := newSink(nonce, res.StartedAt, opts, track)
	k.trace = []byte(sh.proto.call(track) + " " + nonce + " ")
	stdin := ""
	var in *fifo
	if opts.Stdin != nil {
		var err error
		// Its name is drawn apart from the nonce: the command can read
		// it (/proc/self/fd/0, the directory).
		if in, err = newFifo(filepath.Join(dir, "in-"+newNonce()), opts.Stdin); err != nil {
			return corral.StartFailed(res, err)
		}
		stdin = in.path
	}
	src, keepDebug, status := "", false, sh.status
	if sh.proto.kind == bashProto && !opts.snapshot && dir != "" {
		src = filepath.Join(dir, codeName)
		// Until the shell has reported its flags (after Attach), set -T
		// might be the user's: the file's set +T would take it.
		keepDebug = sh.flagsKnown && keepsDebug(sh.functrace, sh.xtrace, sh.verbose)
		st := ""
		if keepDebug && !sh.xtrace {
			// The file's set +T would clear $?: the file sets it.
			if status > 0 && status < 256 && hasCommands(code) {
				st = sh.proto.fn + "s " + strconv.Itoa(status) + "||"
			}
			status = 0
		}
		if err := sh.writeCode(src, codeText(code, sh.xtrace, sh.verbose, keepDebug, st)); err != nil {
			if in != nil {
				in.close()
			}
			return corral.StartFailed(res, fmt.Errorf("session: the command's code file: %w", err))
		}
	}
	merged := corral.SameWriter(opts.Stdout, opts.Stderr)
	var ps [2]*cmdPipe // the command's own stdout and stderr (cmdpipe_unix.go)
	outs, fresh := "", false
	var fo []string // Fo's arguments (foArgs)
	switch {
	case opts.snapshot || dir == "":
	case sh.verbose && sh.proto.kind == posixProto && sh.pipes[0] != nil:
		// dash echoes this line as it reads it, on the stderr the last
		// command left: that command's FIFOs serve this one too.
		ps = sh.pipes
	default:
		var err error
		if ps, err = sh.cmdPipes(dir); err != nil {
			if in != nil {
				in.close()
			}
			return corral.StartFailed(res, fmt.Errorf("session: output fifo: %w", err))
		}
		kinds := sh.fdKinds()
		to := outTargets(ps, kinds, merged)
		outs, fresh = outRedirs(to), true
		sh.lastMerged = merged && kinds[1] >= 0
		if src != "" {
			fo = foArgs(to, sh.proto.dir)
		}
	}
	k.pipes = ps
	line := sh.proto.commandLineS(code, nonce, stdin, track, sh.cfg.HoldDir != "", sh.xtrace, sh.verbose, sh.evalFn, status, sh.stdinSet, sh.execFn, merged && !fresh, outs, src, keepDebug, fo...)
	sh.stdinSet = stdin != "" && !sh.execFn
	sh.endClosed2 = sh.xtrace
	if sh.verbose && sh.proto.kind == posixProto {
		k.echo, k.echoAs = echoedLine(line, code)
	}
	var meter *corral.Meter
	if !opts.snapshot && dir != "" {
		meter = sh.tree.Measure()
	}
	for i, p := range ps {
		if p == nil {
			continue
		}
		sh.outMu[i].Lock()
		p.k = k
		sh.outMu[i].Unlock()
	}
	sh.mu.Lock()
	sh.cur = k
	if fresh {
		for i, p := range ps {
			sh.live[p] = struct{}{}
			go sh.readPipe(i, p)
		}
		sh.pipes = ps
	}
	sh.mu.Unlock()
	finish := func() {
		if meter != nil {
			meter.Account(res)
			accountNote(res, meter)
			meter = nil
		}
		sh.mu.Lock()
		sh.cur = nil
		sh.mu.Unlock()
		if fresh {
			for _, p := range ps {
				p.release()
			}
		}
		k.close()
		if in != nil {
			in.close()
		}
		res.EndedAt = time.Now()
		res.Duration = res.EndedAt.Sub(res.StartedAt)
		res.FirstOutput = k.out.FirstOutput()
		res.StdoutBytes, res.StderrBytes = k.out.Bytes(0), k.out.Bytes(1)
		if werr := k.out.WriteErr(); werr != nil {
			res.OutputError = werr.Error()
		}
	}
	if _, err := sh.ctl.Write([]byte(line)); err != nil {
		// Nothing of the command reached the shell: it is gone.
		sh.dead.Store(true)
		finish()
		res, _ = corral.StartFailed(res, errShellGone)
		return res, errUnusable
	}

	var stopped corral.Outcome
	died, unanswered := false, false
	idle := time.NewTimer(idleFirst)
	defer idle.Stop()
wait:
	for {
		select {
		case <-k.found[0]:
		case <-k.found[1]:
		case <-sh.detached:
			finish()
			res.Outcome = corral.OutcomeCancelled
			res.Error = "the session was detached; the command goes on in its shell"
			return corral.Finish(res, ErrClosed)
		case <-sh.tree.Exited():
			died = true
		case <-ctx.Done():
			stopped = corral.OutcomeOf(ctx)
		case <-k.limitHit:
			stopped = corral.OutcomeOutputLimit
		case <-idle.C:
			if !sh.waitingForInput() {
				idle.Reset(idleEvery)
				continue
			}
			// The shell has read all we sent and waits for more: its
			// answer is in the output pipes already (it wrote it
			// before reading on), or will never come.
			if !k.waitMarkers(min(sh.cfg.Drain, idleAnswer)) {
				unanswered = true
			}
		}
		break wait
	}
	if unanswered {
		sh.dead.Store(true)
		res.Error = "the session's shell stopped answering: it waits for its next command without having reported the end of this one (set -n; a function named builtin or command that hides the shell's own); the session restarts"
		if fd := sh.markFdMoved(); fd >= 0 {
			res.Error = fmt.Sprintf("the command replaced or closed the shell's descriptor %d, where corral's shell reports the end of each command; the session restarts", fd)
		}
	} else if !died && stopped == "" {
		// One marker is in; the other tells where the rest of the
		// command's output ends on its stream.
		if !k.waitMarkers(sh.cfg.Drain) {
			sh.dead.Store(true)
			res.Error = "the command closed the shell's stdout or stderr; the session restarts"
			if fd := sh.markFdMoved(); fd >= 0 {
				res.Error = fmt.Sprintf("the command replaced or closed the shell's descriptor %d, where corral's shell reports the end of each command; the session restarts", fd)
			}
		}
	}
	if !died && !unanswered && stopped == "" {
		select {
		case <-k.limitHit:
			stopped = corral.OutcomeOutputLimit
		default:
		}
	}
	var lifecycle error
	diedWhy := ""
	switch {
	case unanswered:
		lifecycle = sh.stop(sh.cfg.Grace)
		res.Outcome, res.ExitCode = corral.OutcomeExited, -1
	case stopped != "":
		grace, sig := sh.cfg.Grace, opts.StopSignal
		if opts.Grace != 0 {
			grace = opts.Grace
		}
		if stopped == corral.OutcomeCancelled {
			sig = corral.StopSignalFor(ctx, sig) // the signal the client received
		}
		if stopped == corral.OutcomeOutputLimit {
			grace = -1
		}
		var tres *corral.Result
		lifecycle, tres = sh.stopWith(sig, grace, opts.Escalate)
		if tres != nil {
			res.ProcessesStopped, res.DescendantsKilled = tres.ProcessesStopped, tres.DescendantsKilled
			res.Signal = tres.Signal
		}
		res.Outcome = stopped
	case died && sh.closing.Load():
		lifecycle = sh.stop(sh.cfg.Grace)
		res.Outcome = corral.OutcomeCancelled
		res.Error = joinErr(res.Error, "the session was closed")
	case died:
		var st *corral.Result
		lifecycle, st = sh.stopWith(nil, sh.cfg.Grace, nil)
		why := "the shell exited; the session restarts"
		switch {
		case st == nil:
			res.Outcome, res.ExitCode = corral.OutcomeExited, -1
		case st.Signal != 0:
			res.Outcome, res.Signal = corral.OutcomeSignaled, st.Signal
		case st.ExitCode < 0:
			// A shell taken over by Attach is not our child: how it
			// ended is not ours to learn.
			res.Outcome, res.ExitCode = corral.OutcomeExited, -1
			why = "the shell exited with a status this process cannot know (it took the shell over from an earlier owner); the session restarts"
		default:
			res.Outcome, res.ExitCode = corral.OutcomeExited, st.ExitCode
		}
		diedWhy = why
	default:
		res.Outcome, res.ExitCode = corral.OutcomeExited, k.exitCode()
		if !opts.snapshot {
			sh.status = res.ExitCode // a snapshot's : keeps the user's
		}
	}
	finish()
	if res.OOMKills != nil && *res.OOMKills > 0 {
		switch {
		case died && res.Signal == int(syscall.SIGKILL):
			res.Outcome = corral.OutcomeOOM
			diedWhy = "the session's shell was killed by the kernel's OOM killer (the session reached its memory limit); the session restarts"
		case res.Outcome == corral.OutcomeExited && res.ExitCode == 128+int(syscall.SIGKILL):
			res.Outcome, res.Signal = corral.OutcomeOOM, int(syscall.SIGKILL)
			res.Error = joinErr(res.Error, "killed by the kernel's OOM killer (the session reached its memory limit); the session's shell goes on")
		}
	}
	if diedWhy != "" {
		res.Error = joinErr(res.Error, diedWhy)
	}
	if flags, evalFn, ok := k.shellFlags(); ok {
		sh.xtrace, sh.evalFn = strings.IndexByte(flags, 'x') >= 0, evalFn
		sh.execFn = k.execFn
		sh.verbose = strings.IndexByte(flags, 'v') >= 0
		sh.functrace = strings.IndexByte(flags, 'T') >= 0
		sh.flagsKnown = true
		if evalFn {
			res.Error = joinErr(res.Error, "the command defined a function named eval, which would receive every later command instead of the shell's eval: corral removes it before the next command")
		}
	}
	if cwd, env, ok := k.shellState(); ok {
		cwd = sh.trueCwd(cwd)
		sh.mu.Lock()
		sh.cwd, sh.haveState = cwd, true
		if env != nil {
			sh.env = env
		}
		sh.mu.Unlock()
	}
	var cause error
	switch {
	case stopped == corral.OutcomeTimeout || stopped == corral.OutcomeCancelled:
		cause = context.Cause(ctx)
	case res.Outcome == corral.OutcomeCancelled:
		cause = ErrClosed
	}
	return corral.Finish(res, cause, lifecycle)
}

// accountNote says in res.Accounting which of a session command's
// numbers are the session's rather than the command's own: the shell
// lives on, so the tree's peaks are since the shell started, unless the
// kernel resets memory.peak per reader.
func accountNote(res *corral.Result, m *corral.Meter) {
	var which []string
	if res.MemoryPeakBytes != nil && !m.PeakSinceMeasure() {
		which = append(which, "memory_peak_bytes")
	}
	if res.PidsPeak != nil {
		which = append(which, "pids_peak")
	}
	if len(which) > 0 {
		verb := " is"
		if len(which) > 1 {
			verb = " are"
		}
		res.Accounting = joinErr(res.Accounting, strings.Join(which, " and ")+verb+" the session's since its shell started")
	}
}

// errShellGone is why a command was not handed to the session's shell.
var errShellGone = errors.New("the session's shell was gone before the command was submitted")

// idleFirst and idleEvery space the checks of whether a shell that has
// not answered waits for input (waitingForInput): a command still running
// after idleFirst is looked at every idleEvery.
const (
	idleFirst = 100 * time.Millisecond
	idleEvery = 500 * time.Millisecond
	// idleAnswer bounds the wait for an answer already in the pipes: the
	// shell has written its markers and reads on, and the session's
	// readers have yet to take them. It was 250 ms, and a loaded daemon
	// (200 concurrent execs under the race detector, in CI) took longer
	// than that to parse markers already written: healthy commands were
	// ended with -1 as if the shell had stopped answering. A shell that
	// truly stopped answering (set -n) is now said so after about 2 s.
	idleAnswer = 2 * time.Second
)

// waitingForInput reports whether the shell is blocked reading its
// command channel: it has read every command sent and runs nothing. Only
// where /proc shows a process's system call (Linux, with the right to
// look: a shell taken over from another owner may not allow it) can this
// be known; elsewhere it reports false.
func (sh *shell) waitingForInput() bool {
	pid := strconv.Itoa(sh.pid())
	b, err := os.ReadFile("/proc/" + pid + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 || f[0] != strconv.Itoa(syscall.SYS_READ) {
		return false
	}
	fd, err := strconv.ParseInt(f[1], 0, 64)
	if err != nil {
		return false
	}
	in, err := os.Stat("/proc/" + pid + "/fd/" + strconv.FormatInt(fd, 10))
	if err != nil {
		return false
	}
	ctl, err := sh.ctl.Stat()
	return err == nil && os.SameFile(in, ctl)
}

// markFdMoved returns the first of the shell's marker descriptors
// (markOutFd, markErrFd) that is no longer the pipe the session reads,
// or -1 if both are, or if /proc cannot tell.
func (sh *shell) markFdMoved() int {
	for i, fd := range []int{markOutFd, markErrFd} {
		ours, err := sh.streams[i].Stat()
		if err != nil {
			return -1
		}
		theirs, err := os.Stat("/proc/" + strconv.Itoa(sh.pid()) + "/fd/" + strconv.Itoa(fd))
		if errors.Is(err, os.ErrNotExist) {
			return fd // closed
		}
		if err != nil {
			return -1
		}
		if !os.SameFile(ours, theirs) {
			return fd
		}
	}
	return -1
}

// trueCwd is the shell's working directory, given the $PWD it reported: a
// command can assign PWD without moving the shell, so where the kernel
// says the shell is wins (/proc/PID/cwd), unless $PWD names that same
// directory (a logical path through a symlink, as cd leaves it). Where
// there is no /proc, $PWD is all there is.
func (sh *shell) trueCwd(logical string) string {
	link := "/proc/" + strconv.Itoa(sh.pid()) + "/cwd"
	real, err := os.Readlink(link)
	if err != nil || real == logical {
		return logical
	}
	if r, ok := strings.CutSuffix(real, " (deleted)"); ok {
		return r // gone: a reset says so when it cannot go back there
	}
	if a, err := os.Stat(logical); err == nil && filepath.IsAbs(logical) {
		if b, err := os.Stat(link); err == nil && os.SameFile(a, b) {
			return logical
		}
	}
	return real
}

// stop ends the shell and its whole tree (grace, then kill), waits up to
// the drain bound for the output pipes to close, and releases everything.
// Only the first call does anything.
func (sh *shell) stop(grace time.Duration) error {
	err, _ := sh.stopWith(nil, grace, nil)
	return err
}

// stopWith is stop sending sig first (nil: SIGTERM), with a grace that
// escalate ends early. It returns the lifecycle failures and the result of
// the shell's tree (nil if a call before this one stopped it): the
// processes it stopped, how its root ended.
func (sh *shell) stopWith(sig os.Signal, grace time.Duration, escalate <-chan struct{}) (error, *corral.Result) {
	var tres *corral.Result
	sh.stopOnce.Do(func() {
		sh.dead.Store(true)
		var errs []error
		sh.tree.StopWith(sig, grace, escalate)
		r, err := sh.tree.Wait()
		tres = r
		var re *corral.RunError
		if errors.As(err, &re) && re.Lifecycle() != nil {
			errs = append(errs, re.Lifecycle())
		}
		sh.ctl.Close()
		sh.closeCode()
		sh.closeWriters() // the drain below waits for end of file
		live := sh.livePipes()
		drain := time.NewTimer(sh.cfg.Drain)
		cut := false
		ends := []<-chan struct{}{sh.eof[0], sh.eof[1]}
		for _, p := range live {
			ends = append(ends, p.done)
		}
		for _, end := range ends {
			if cut {
				break
			}
			select {
			case <-end:
			case <-drain.C:
				cut = true
				errs = append(errs, corral.ErrDrainCutOff)
			}
		}
		drain.Stop()
		cutPipes(live)
		sh.dropFree()
		for i, f := range sh.streams {
			f.SetReadDeadline(time.Now())
			<-sh.eof[i]
			f.Close()
		}
		sh.stopErr = errors.Join(errs...)
	})
	return sh.stopErr, tres
}

// closeWriters closes a held session's own write ends of its output.
func (sh *shell) closeWriters() {
	for _, f := range sh.writers {
		if f != nil {
			f.Close()
		}
	}
}

// detach lets the shell go on without us: a running exec returns, and our
// ends of its channel and output are closed (the shell holds its own).
func (sh *shell) detach() {
	sh.detachMu.Do(func() {
		close(sh.detached)
		sh.tree.Release()
		sh.ctl.Close()
		sh.closeCode()
		sh.closeWriters()
		cutPipes(sh.livePipes())
		sh.dropFree()
		for i, f := range sh.streams {
			f.Close()
			<-sh.eof[i]
		}
	})
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// fifo feeds a command's stdin through a named pipe in the session's
// private directory.
//
// Both of our ends are open before the command line is sent, and opening
// them never waits: a reader first (opening a FIFO for reading with
// O_NONBLOCK needs no writer), then the writer (which then has a reader).
// So a failure to open ours (EMFILE on a daemon out of descriptors) fails
// the command before the shell is told anything, instead of leaving the
// shell in open(2) for ever, and the shell's own open, in the command's
// redirection, finds a writer at once. Our reader reads nothing: it is
// there so that the writer has a reader until the shell opens its end.
// Once the caller's input is all written, ours is closed, and the writer
// is closed (end of file for the command) as soon as the shell holds its
// reading end: a shell opening a FIFO whose writers are all gone would
// wait in open(2) for another.
type fifo struct {
	path   string
	stop   chan struct{} // closed by close
	copied chan struct{} // closed once the copy from the caller's reader returned
	// reading: the copy is in a Read of the caller's reader.
	reading atomic.Bool

	// mu guards our ends, nil once closed.
	mu   sync.Mutex
	r, w *os.File
}

func newFifo(path string, src io.Reader) (*fifo, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("session: stdin fifo: %w", err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("session: stdin fifo: %w", err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		r.Close()
		os.Remove(path)
		return nil, fmt.Errorf("session: stdin fifo: %w", err)
	}
	f := &fifo{path: path, r: r, w: w, stop: make(chan struct{}), copied: make(chan struct{})}
	go f.feed(w, src)
	return f, nil
}

// feed copies src to the FIFO, then ends the command's input once the
// shell has its reading end open.
func (f *fifo) feed(w *os.File, src io.Reader) {
	if testHookFeed != nil {
		testHookFeed()
	}
	err := f.copy(w, src) // EPIPE when the command stops reading is not its failure
	close(f.copied)
	f.closeEnd(&f.r)
	if err == nil {
		// A writer that opens without waiting finds a reader: now that
		// ours is closed, the shell's.
		t := time.NewTimer(0)
		defer t.Stop()
		for d := 50 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
			select {
			case <-f.stop:
				return
			case <-t.C:
			}
			if p, err := os.OpenFile(f.path, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0); err == nil {
				p.Close()
				break
			}
			t.Reset(d)
		}
	}
	f.closeEnd(&f.w)
}

// testHookFeed, if set, runs as a command's stdin copy starts.
var testHookFeed func()

// copy is io.Copy from src to w that reads nothing once close has been
// called, and says when it is in a Read (close waits for it otherwise).
func (f *fifo) copy(w *os.File, src io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-f.stop:
			return nil
		default:
		}
		f.reading.Store(true)
		n, rerr := src.Read(buf)
		f.reading.Store(false)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func (f *fifo) closeEnd(end **os.File) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *end != nil {
		(*end).Close()
		*end = nil
	}
}

// close ends the command's stdin: it closes our ends (the command, if it
// still reads, gets end of file) and removes the FIFO, then waits for
// the copy from the caller's reader to end, so that the caller may use
// its reader again once Exec returns (the race detector caught the copy
// of a command that never read its stdin, scheduled late, reading a
// reader the next command's copy read too). A copy in a Read that
// blocks is not waited for: it goes on until that Read returns, and
// reads no more. The wait is bounded all the same.
func (f *fifo) close() {
	close(f.stop)
	f.closeEnd(&f.w)
	f.closeEnd(&f.r)
	os.Remove(f.path)
	for t, end := 0, time.Now().Add(time.Second); ; t++ {
		select {
		case <-f.copied:
			return
		default:
		}
		if f.reading.Load() || time.Now().After(end) {
			return
		}
		pause(t)
	}
}
