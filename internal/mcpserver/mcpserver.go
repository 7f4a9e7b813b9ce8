// Package mcpserver serves corral to coding agents over the Model Context
// Protocol: tools that run shell code in the daemon's sessions (exec,
// exec_wait, exec_cancel) and list and end them (sessions, kill_session).
//
// A Server holds the jobs it started: each job is one command, run through
// the daemon by a goroutine of the Server that keeps the daemon's stream
// open, so a command outlives the tool call that started it (a yield) and
// can be waited on again. The merged output of a job is kept under the
// state directory's mcp-output/ (see JobFileLimit, DirLimit, Retention).
//
// A tool call whose context ends (the client sent notifications/cancelled
// or went away) stops the job it is waiting on: SIGTERM to the tree, and
// SIGKILL after killAfter. Jobs no call waits on run on until they end or
// their timeout passes; Close waits for them.
package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/store"
)

// Defaults and bounds of the exec tool.
const (
	DefaultTimeout   = 120 * time.Second
	DefaultYield     = 30 * time.Second
	MaxYield         = 55 * time.Second
	DefaultMaxOutput = 30000
	// killAfter is how long a tree stopped because its call was cancelled
	// gets between SIGTERM and SIGKILL.
	killAfter = 50 * time.Millisecond
	// stopWait bounds how long exec_cancel waits for a stopped job.
	stopWait = 30 * time.Second
)

// AgentEnv is set for every command unless Config.NoAgentEnv or the
// request's env says otherwise: nothing waits on a pager or a password.
var AgentEnv = []string{"PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0"}

// Daemon is what the server needs of a client of the daemon
// (*client.Client has it).
type Daemon interface {
	Exec(ctx context.Context, name, code string, o client.ExecOptions) (*client.Result, error)
	List(ctx context.Context) ([]client.Session, error)
	Kill(ctx context.Context, all bool, names ...string) ([]string, error)
}

// Config configures a Server.
type Config struct {
	// Dial connects to the daemon (starting it if need be). The server
	// calls it on first use, and again after it lost the daemon.
	Dial func(ctx context.Context) (Daemon, error)
	// StateDir is the daemon's state directory; mcp-output/ is made in it.
	StateDir string
	// Session is the default session; "" derives one from Dir.
	Session string
	// Dir is the server's working directory (a new session's first) and
	// Env the environment new sessions and oneshots start with.
	Dir string
	Env []string
	// NoAgentEnv leaves PAGER, GIT_PAGER and GIT_TERMINAL_PROMPT alone.
	NoAgentEnv bool
	Version    string
	// Remote says Dial reaches a remote daemon: Dir and Env are then not
	// filled in from this process (nothing of this machine is sent; a
	// new session starts in the daemon's home with its environment, the
	// agent variables and a request's env).
	Remote bool
}

// Server is corral's MCP server. Its tools may be served on any number of
// connections at once (NewMCP for each, or one shared).
type Server struct {
	cfg    Config
	outDir string
	dirErr error

	// mu guards the fields that follow.
	mu   sync.Mutex
	d    Daemon
	jobs map[string]*job

	wg sync.WaitGroup // the job goroutines

	sweepMu   sync.Mutex
	lastSweep time.Time
}

// sweepEvery is how often a new job has mcp-output/ swept.
const sweepEvery = time.Minute

// maybeSweep sweeps mcp-output/ if it was not swept for sweepEvery.
func (s *Server) maybeSweep() {
	if s.dirErr != nil {
		return
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if time.Since(s.lastSweep) < sweepEvery {
		return
	}
	s.lastSweep = time.Now()
	sweep(s.outDir, s.busyFile)
}

// New makes a Server. The state directory's mcp-output/ is made and swept
// (files past Retention or DirLimit removed).
func New(cfg Config) (*Server, error) {
	if cfg.Dial == nil {
		return nil, errors.New("mcpserver: Config.Dial is nil")
	}
	if cfg.Dir == "" && !cfg.Remote {
		cfg.Dir, _ = os.Getwd()
	}
	if cfg.Env == nil && !cfg.Remote {
		cfg.Env = os.Environ()
	}
	if cfg.Session == "" && cfg.Remote {
		// Named after this directory still (one project, one session,
		// there too); its path is not sent.
		wd, _ := os.Getwd()
		cfg.Session = DefaultSession(wd)
	} else if cfg.Session == "" {
		cfg.Session = DefaultSession(cfg.Dir)
	}
	if err := store.CheckName(cfg.Session); err != nil {
		return nil, fmt.Errorf("default session: %w", err)
	}
	s := &Server{cfg: cfg, jobs: map[string]*job{}}
	s.outDir, s.dirErr = outputDir(cfg.StateDir)
	s.maybeSweep()
	return s, nil
}

// DefaultSessionName is the session the server's exec uses by default.
func (s *Server) DefaultSessionName() string { return s.cfg.Session }

// Close waits until every job has ended (each is bounded by its
// timeout). It stops none: see StopAll.
func (s *Server) Close() {
	s.wg.Wait()
}

// StopAll stops every job still running (SIGTERM, then SIGKILL after a
// short grace): for a server told to exit, whose jobs nobody will wait on.
func (s *Server) StopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if !j.ended() {
			j.stop("corral mcp is exiting", true)
		}
	}
}

func (s *Server) busyFile(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, _, _ := strings.Cut(name, ".") // <job>.out, <job>.json, <job>.stdout.out
	j, ok := s.jobs[id]
	return ok && !j.ended()
}

// daemon returns the connected daemon, dialling it if need be.
func (s *Server) daemon(ctx context.Context) (Daemon, error) {
	s.mu.Lock()
	d := s.d
	s.mu.Unlock()
	if d != nil {
		return d, nil
	}
	d, err := s.cfg.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to the corral daemon: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d == nil {
		s.d = d
	}
	return s.d, nil
}

// lost forgets d after a call found it gone, so the next call dials (and
// starts) a daemon again.
func (s *Server) lost(d Daemon, err error) bool {
	if !errors.Is(err, client.ErrLost) && !errors.Is(err, client.ErrDaemonStopping) {
		return false
	}
	s.mu.Lock()
	if s.d == d {
		s.d = nil
	}
	s.mu.Unlock()
	if c, ok := d.(interface{ Close() error }); ok {
		c.Close()
	}
	return true
}

// job is one command run for a tool call.
type job struct {
	id      string
	session string // "" for a oneshot
	out     *output
	started time.Time
	// stdout and stderr are each stream alone, with separate_stderr (else
	// nil); mu guards their offsets.
	stdout, stderr *output

	interrupt, kill chan struct{}
	intOnce         sync.Once
	killOnce        sync.Once
	done            chan struct{} // closed when the fields below are final

	res      *client.Result
	err      error
	lostD    bool // the daemon went away under the command
	cwd      string
	cwdErr   string
	duration time.Duration
	final    *ExecOutput // the result of a job loaded from its record

	mu      sync.Mutex
	offset  int64 // where the last reply's output ended
	outOff  int64 // and its stdout and stderr
	errOff  int64
	stopped string
}

// lastOffset is where the last reply's output ended: where exec_wait and
// exec_cancel read from by default.
func (j *job) lastOffset() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.offset
}

func (j *job) ended() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// stop asks the daemon to stop the tree as a timeout does; with hard,
// SIGKILL follows after killAfter.
func (j *job) stop(why string, hard bool) {
	j.mu.Lock()
	if j.stopped == "" {
		j.stopped = why
	}
	j.mu.Unlock()
	j.intOnce.Do(func() { close(j.interrupt) })
	if hard {
		go func() {
			select {
			case <-j.done:
			case <-time.After(killAfter):
				j.killOnce.Do(func() { close(j.kill) })
			}
		}()
	}
}

func newJobID() string {
	var b [8]byte
	rand.Read(b[:])
	return "j" + hex.EncodeToString(b[:])
}

// ErrUnknownJob is the error for a job id this server does not hold.
var ErrUnknownJob = errors.New("no such job")

func (s *Server) job(id string) (*job, error) {
	if id == "" {
		return nil, errors.New("job is required (the job id an exec reply gave)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		if j = s.loadJob(id); j != nil {
			s.jobs[id] = j
			return j, nil
		}
		return nil, fmt.Errorf("job %q: %w (a running job belongs to the corral mcp process that started it; a finished one is kept 24 h)", id, ErrUnknownJob)
	}
	return j, nil
}

// ExecInput is the input of exec.
type ExecInput struct {
	Command        string            `json:"command" jsonschema:"shell code to run (bash or sh syntax: it is the session's shell)"`
	Session        string            `json:"session,omitempty" jsonschema:"session name ([A-Za-z0-9][A-Za-z0-9._-]{0,63}), created on first use; default: the server's session"`
	Oneshot        Bool              `json:"oneshot,omitempty" jsonschema:"run in a fresh contained shell instead of a session"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"directory to cd to before the command (in a session the cd persists)"`
	Stdin          *string           `json:"stdin,omitempty" jsonschema:"text for the command's stdin; without it stdin is at EOF"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"variables exported for the command (in a session they persist)"`
	TimeoutMs      *Int              `json:"timeout_ms,omitempty" jsonschema:"stop the tree (and reset the session) after this long; default 120000"`
	YieldMs        *Int              `json:"yield_ms,omitempty" jsonschema:"return with status running after this long if the command has not ended (it goes on; see exec_wait); default 30000, at most 55000"`
	MaxOutputBytes *Int              `json:"max_output_bytes,omitempty" jsonschema:"most output bytes the reply carries (head and tail past it); default 30000, at most 524288"`
	SeparateStderr Bool              `json:"separate_stderr,omitempty" jsonschema:"also give stdout and stderr apart (each bounded by max_output_bytes) in this reply and every exec_wait of the job"`
	Memory         string            `json:"memory,omitempty" jsonschema:"memory limit of the session's whole tree (cgroup memory.max), as bytes or with a unit: 512MiB, 2GiB; set when the session is created, changed in place on an existing one; past it the OOM killer ends the command (outcome oom)"`
	CPUs           *Float            `json:"cpus,omitempty" jsonschema:"CPU limit of the session's tree in CPUs (cgroup cpu.max): 0.5, 2"`
	Pids           *Int              `json:"pids,omitempty" jsonschema:"most processes the session's tree may have at once (cgroup pids.max): contains a fork bomb"`
}

// ExecOutput is the reply of exec, exec_wait and exec_cancel.
type ExecOutput struct {
	Status  string `json:"status" jsonschema:"done or running"`
	Job     string `json:"job" jsonschema:"the job id, for exec_wait and exec_cancel"`
	Session string `json:"session,omitempty" jsonschema:"the session it ran in (absent for a oneshot)"`
	// Outcome and the rest are set once the command has ended.
	Outcome  string `json:"outcome,omitempty" jsonschema:"exited, signaled, timeout, cancelled, output_limit, stdio_held, oom, start_failed, or daemon_lost"`
	ExitCode *int   `json:"exit_code,omitempty" jsonschema:"the exit status (-1 if killed or never started)"`
	Signal   int    `json:"signal,omitempty" jsonschema:"the signal that killed it"`
	Output   string `json:"output" jsonschema:"stdout and stderr merged in the order the daemon received them, from offset to next_offset"`
	// OutputNotUTF8 says output (or stdout, stderr) held bytes that are
	// not UTF-8: JSON text cannot carry them, so each shows as U+FFFD.
	OutputNotUTF8 bool `json:"output_not_utf8,omitempty" jsonschema:"output, stdout or stderr held bytes that are not UTF-8, each shown as U+FFFD; the exact bytes are in output_file"`
	// Stdout and Stderr are each stream's output since the last reply,
	// with separate_stderr.
	Stdout *string `json:"stdout,omitempty" jsonschema:"with separate_stderr: stdout since the last reply"`
	Stderr *string `json:"stderr,omitempty" jsonschema:"with separate_stderr: stderr since the last reply"`
	// Offset and NextOffset place output in the job's whole output.
	Offset       int64  `json:"offset"`
	NextOffset   int64  `json:"next_offset" jsonschema:"where the next exec_wait reads from by default"`
	TotalBytes   int64  `json:"total_bytes" jsonschema:"output bytes of the job so far"`
	Truncated    bool   `json:"truncated" jsonschema:"output is the head and tail of the range, with one line between saying what was left out"`
	OmittedBytes int64  `json:"omitted_bytes"`
	OutputFile   string `json:"output_file,omitempty" jsonschema:"the job's whole output (up to 64 MiB), kept 24 h"`
	Cwd          string `json:"cwd,omitempty" jsonschema:"the session's working directory after the command"`
	CwdBytes     string `json:"cwd_bytes,omitempty" jsonschema:"the cwd exactly, base64, when it is not UTF-8 (cwd then shows U+FFFD for each byte that is not)"`
	DurationMs   int64  `json:"duration_ms"`
	Error        string `json:"error,omitempty" jsonschema:"what went wrong besides the command's own status"`
	// Accounting of the command, read from the session's cgroup.
	MemoryPeakBytes *int64         `json:"memory_peak_bytes,omitempty" jsonschema:"memory peak (memory.peak): the session's since its shell started unless accounting says otherwise"`
	CPUUserMs       *float64       `json:"cpu_user_ms,omitempty" jsonschema:"user CPU time the session's tree used during the command"`
	CPUSystemMs     *float64       `json:"cpu_system_ms,omitempty" jsonschema:"system CPU time the session's tree used during the command"`
	CPUThrottledMs  *float64       `json:"cpu_throttled_ms,omitempty" jsonschema:"time the tree was throttled by its CPU limit during the command"`
	PidsPeak        *int64         `json:"pids_peak,omitempty" jsonschema:"most processes the session's tree had at once (the session's)"`
	OOMKills        *int64         `json:"oom_kills,omitempty" jsonschema:"processes the OOM killer ended during the command"`
	Accounting      string         `json:"accounting,omitempty" jsonschema:"why an accounting field is absent, and which are the session's rather than the command's"`
	Limits          *corral.Limits `json:"limits,omitempty" jsonschema:"the session's resource limits after the command"`
}

func (s *Server) exec(ctx context.Context, req *mcp.CallToolRequest, in ExecInput) (*mcp.CallToolResult, *ExecOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, nil, errors.New("command is required (shell code to run)")
	}
	timeout, err := msArg("timeout_ms", in.TimeoutMs, DefaultTimeout, 1, 0)
	if err != nil {
		return nil, nil, err
	}
	yield, max, err := waitArgs(in.YieldMs, in.MaxOutputBytes)
	if err != nil {
		return nil, nil, err
	}
	name := in.Session
	if bool(in.Oneshot) {
		if name != "" {
			return nil, nil, errors.New("session and oneshot exclude each other")
		}
	} else {
		if name == "" {
			name = s.cfg.Session
		}
		if err := store.CheckName(name); err != nil {
			return nil, nil, fmt.Errorf("session: %w", err)
		}
	}
	code, err := s.code(in)
	if err != nil {
		return nil, nil, err
	}
	limits, err := limitsArg(in)
	if err != nil {
		return nil, nil, err
	}
	d, err := s.daemon(ctx)
	if err != nil {
		return nil, nil, err
	}
	j := &job{id: newJobID(), session: name, started: time.Now(),
		interrupt: make(chan struct{}), kill: make(chan struct{}), done: make(chan struct{})}
	if bool(in.Oneshot) {
		j.session = ""
	}
	dir := s.outDir
	if s.dirErr != nil {
		dir = ""
	}
	j.out = newOutput(dir, j.id)
	if s.dirErr != nil {
		j.out.fileErr = s.dirErr.Error()
	}
	opts := client.ExecOptions{Stdout: j.out, Stderr: j.out, Timeout: timeout, Oneshot: bool(in.Oneshot),
		Dir: s.cfg.Dir, Cwd: in.Cwd, Env: s.env(), Interrupt: j.interrupt, Kill: j.kill, Limits: limits}
	if in.SeparateStderr {
		j.stdout, j.stderr = newOutput(dir, j.id+".stdout"), newOutput(dir, j.id+".stderr")
		opts.Stdout, opts.Stderr = io.MultiWriter(j.out, j.stdout), io.MultiWriter(j.out, j.stderr)
	}
	if in.Stdin != nil {
		opts.Stdin = strings.NewReader(*in.Stdin)
	}
	s.mu.Lock()
	s.jobs[j.id] = j
	s.mu.Unlock()
	s.wg.Add(1)
	go s.run(d, j, code, opts)
	s.maybeSweep()
	return s.await(ctx, j, 0, yield, max)
}

// run runs j's command to its end; it owns the daemon's stream for it.
func (s *Server) run(d Daemon, j *job, code string, opts client.ExecOptions) {
	defer s.wg.Done()
	res, err := d.Exec(context.Background(), j.session, code, opts)
	j.res, j.err = res, err
	j.duration = time.Since(j.started)
	if res == nil {
		j.lostD = s.lost(d, err)
	} else if j.session != "" {
		// The session's cwd after the command, as the daemon said with
		// the result.
		j.cwd = res.Cwd
		if j.cwd == "" && res.Outcome != corral.OutcomeStartFailed {
			j.cwdErr = "the session's shell is gone"
		}
	}
	j.out.close()
	if j.stdout != nil {
		j.stdout.close()
		j.stderr.close()
	}
	close(j.done)
	s.record(j)
}

// await waits for j to end, yield to pass, or ctx to end (then it stops j)
// and returns the reply for output from offset on.
func (s *Server) await(ctx context.Context, j *job, from int64, yield time.Duration, max int) (*mcp.CallToolResult, *ExecOutput, error) {
	t := time.NewTimer(yield)
	defer t.Stop()
	select {
	case <-j.done:
	case <-t.C:
	case <-ctx.Done():
		// The client cancelled this call or went away: the command it was
		// waiting on is stopped, and this reply goes nowhere.
		j.stop("the MCP client cancelled the call or disconnected", true)
		select {
		case <-j.done:
		case <-time.After(stopWait):
		}
	}
	return s.reply(j, from, max)
}

func (s *Server) reply(j *job, from int64, max int) (*mcp.CallToolResult, *ExecOutput, error) {
	ended := j.ended()
	n, err := j.out.upTo(from)
	if err != nil {
		return nil, nil, err
	}
	r := j.out.render(from, n, max)
	var sout, serr *string
	j.mu.Lock()
	j.offset = n
	if j.stdout != nil {
		on, _ := j.stdout.size()
		en, _ := j.stderr.size()
		a, b := j.stdout.render(j.outOff, on, max).text, j.stderr.render(j.errOff, en, max).text
		sout, serr = &a, &b
		j.outOff, j.errOff = on, en
	}
	j.mu.Unlock()
	o := &ExecOutput{Status: "running", Job: j.id, Session: j.session, Output: r.text, Offset: from, NextOffset: n,
		TotalBytes: n, Truncated: r.truncated, OmittedBytes: r.omitted, OutputFile: r.outputFile,
		DurationMs: time.Since(j.started).Milliseconds(), Stdout: sout, Stderr: serr}
	if r.unavailable {
		o.Error = "part of the requested output is no longer kept (past the output file's limit)"
	}
	if ended {
		j.fillResult(o)
	}
	o.validText()
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: o.text()}}}, o, nil
}

// fillResult sets o's fields of an ended job.
func (j *job) fillResult(o *ExecOutput) {
	o.Status = "done"
	if f := j.final; f != nil { // a job of an earlier server, from its record
		o.Outcome, o.ExitCode, o.Signal, o.DurationMs, o.Cwd, o.CwdBytes = f.Outcome, f.ExitCode, f.Signal, f.DurationMs, f.Cwd, f.CwdBytes
		o.MemoryPeakBytes, o.CPUUserMs, o.CPUSystemMs, o.CPUThrottledMs = f.MemoryPeakBytes, f.CPUUserMs, f.CPUSystemMs, f.CPUThrottledMs
		o.PidsPeak, o.OOMKills, o.Accounting, o.Limits = f.PidsPeak, f.OOMKills, f.Accounting, f.Limits
		o.Error = strings.TrimPrefix(strings.Join([]string{o.Error, f.Error}, "; "), "; ")
		return
	}
	o.DurationMs = j.duration.Milliseconds()
	if j.res == nil {
		o.Outcome = "daemon_lost"
		what := "the call to the daemon failed"
		if j.lostD {
			what = "lost the daemon (it stopped or died) while the command ran; the next daemon stops a command it finds half-run, and the session's shell survives"
		}
		o.Error = fmt.Sprintf("%s: %v", what, j.err)
		return
	}
	o.Outcome = string(j.res.Outcome)
	ec := j.res.ExitCode
	o.ExitCode = &ec
	o.Signal = j.res.Signal
	o.DurationMs = j.res.Duration.Milliseconds()
	o.Cwd = j.cwd
	r := &j.res.Result
	o.MemoryPeakBytes, o.CPUUserMs, o.CPUSystemMs, o.CPUThrottledMs = r.MemoryPeakBytes, r.CPUUserMs, r.CPUSystemMs, r.CPUThrottledMs
	o.PidsPeak, o.OOMKills, o.Accounting = r.PidsPeak, r.OOMKills, r.Accounting
	if !j.res.Limits.IsZero() {
		l := j.res.Limits
		o.Limits = &l
	}
	var msgs []string
	if j.res.Error != "" {
		msgs = append(msgs, j.res.Error)
	}
	var sns *client.StateNotSavedError
	if errors.As(j.err, &sns) {
		msgs = append(msgs, sns.Error())
	}
	if j.cwdErr != "" && j.session != "" {
		msgs = append(msgs, "cwd unknown: "+j.cwdErr)
	}
	if o.Error != "" {
		msgs = append(msgs, o.Error)
	}
	o.Error = strings.Join(msgs, "; ")
}

// record writes j's result next to its output (<job>.json), so a later
// server can answer exec_wait on it.
func (s *Server) record(j *job) {
	if s.dirErr != nil {
		return
	}
	n, _ := j.out.size()
	o := &ExecOutput{Job: j.id, Session: j.session, TotalBytes: n, NextOffset: n}
	j.fillResult(o)
	o.validText()
	b, err := json.Marshal(o)
	if err != nil {
		return
	}
	tmp := filepath.Join(s.outDir, j.id+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err == nil {
		os.Rename(tmp, filepath.Join(s.outDir, j.id+".json"))
	}
}

// loadJob makes a job of an earlier server's record of id, if there is one.
func (s *Server) loadJob(id string) *job {
	if s.dirErr != nil || !validJobID(id) {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(s.outDir, id+".json"))
	if err != nil {
		return nil
	}
	var f ExecOutput
	if json.Unmarshal(b, &f) != nil || f.Job != id {
		return nil
	}
	j := &job{id: id, session: f.Session, final: &f, done: make(chan struct{}),
		interrupt: make(chan struct{}), kill: make(chan struct{}), out: &output{changed: make(chan struct{})}}
	close(j.done)
	j.out.path = filepath.Join(s.outDir, id+".out")
	if fi, err := os.Stat(j.out.path); err == nil {
		j.out.n = fi.Size()
	} else {
		j.out.path = ""
	}
	return j
}

func validJobID(id string) bool {
	if len(id) != 17 || id[0] != 'j' {
		return false
	}
	_, err := hex.DecodeString(id[1:])
	return err == nil
}

// validText makes o's text fields valid UTF-8, as JSON text must be
// (encoding/json would replace each invalid byte with U+FFFD silently):
// output, stdout and stderr with U+FFFD and output_not_utf8 saying so (the
// output file has the bytes), the cwd with U+FFFD and cwd_bytes exact,
// the error with U+FFFD (it names what is in cwd_bytes or the request).
func (o *ExecOutput) validText() {
	valid := func(s *string) bool {
		if s == nil || utf8.ValidString(*s) {
			return true
		}
		*s = strings.ToValidUTF8(*s, "\uFFFD")
		return false
	}
	if !valid(&o.Output) || !valid(o.Stdout) || !valid(o.Stderr) {
		o.OutputNotUTF8 = true
	}
	if cwd := o.Cwd; !valid(&o.Cwd) {
		o.CwdBytes = base64.StdEncoding.EncodeToString([]byte(cwd))
	}
	valid(&o.Error)
}

// text is the short rendering for clients that ignore structuredContent.
func (o *ExecOutput) text() string {
	var b strings.Builder
	where := "session " + o.Session
	if o.Session == "" {
		where = "oneshot"
	}
	if o.Status == "running" {
		fmt.Fprintf(&b, "[job %s still running after %d ms (%s); exec_wait {\"job\":%q} for more, exec_cancel to stop it]\n",
			o.Job, o.DurationMs, where, o.Job)
	} else {
		code := "-"
		if o.ExitCode != nil {
			code = fmt.Sprint(*o.ExitCode)
		}
		fmt.Fprintf(&b, "[job %s %s, exit %s", o.Job, o.Outcome, code)
		if o.Signal != 0 {
			fmt.Fprintf(&b, ", signal %d", o.Signal)
		}
		fmt.Fprintf(&b, ", %d ms, %s", o.DurationMs, where)
		if o.Cwd != "" {
			fmt.Fprintf(&b, ", cwd %s", o.Cwd)
		}
		if o.CPUUserMs != nil && o.CPUSystemMs != nil {
			fmt.Fprintf(&b, ", cpu %.0f+%.0f ms", *o.CPUUserMs, *o.CPUSystemMs)
		}
		if o.MemoryPeakBytes != nil {
			fmt.Fprintf(&b, ", memory peak %d MiB", *o.MemoryPeakBytes>>20)
		}
		b.WriteString("]\n")
	}
	if o.Error != "" {
		fmt.Fprintf(&b, "[error: %s]\n", o.Error)
	}
	if o.OutputNotUTF8 {
		b.WriteString("[output holds bytes that are not UTF-8, shown as \uFFFD; output_file has them exactly]\n")
	}
	b.WriteString(o.Output)
	return b.String()
}

// ExecWaitInput is the input of exec_wait.
type ExecWaitInput struct {
	Job     string `json:"job" jsonschema:"the job id from exec"`
	Offset  *Int   `json:"offset,omitempty" jsonschema:"where in the job's output to start; default: where the last reply ended"`
	YieldMs *Int   `json:"yield_ms,omitempty" jsonschema:"return after this long if the job is still running; default 30000, at most 55000"`
	// MaxOutputBytes as exec's.
	MaxOutputBytes *Int `json:"max_output_bytes,omitempty" jsonschema:"most output bytes the reply carries; default 30000"`
}

func (s *Server) execWait(ctx context.Context, req *mcp.CallToolRequest, in ExecWaitInput) (*mcp.CallToolResult, *ExecOutput, error) {
	j, err := s.job(in.Job)
	if err != nil {
		return nil, nil, err
	}
	yield, max, err := waitArgs(in.YieldMs, in.MaxOutputBytes)
	if err != nil {
		return nil, nil, err
	}
	from := j.lastOffset()
	if in.Offset != nil {
		if *in.Offset < 0 {
			return nil, nil, errors.New("offset must not be negative")
		}
		from = int64(*in.Offset)
	}
	if _, err := j.out.upTo(from); err != nil {
		return nil, nil, err
	}
	return s.await(ctx, j, from, yield, max)
}

// ExecCancelInput is the input of exec_cancel.
type ExecCancelInput struct {
	Job            string `json:"job" jsonschema:"the job id from exec"`
	MaxOutputBytes *Int   `json:"max_output_bytes,omitempty" jsonschema:"most output bytes the reply carries; default 30000"`
}

func (s *Server) execCancel(ctx context.Context, req *mcp.CallToolRequest, in ExecCancelInput) (*mcp.CallToolResult, *ExecOutput, error) {
	j, err := s.job(in.Job)
	if err != nil {
		return nil, nil, err
	}
	max, err := maxArg(in.MaxOutputBytes)
	if err != nil {
		return nil, nil, err
	}
	from := j.lastOffset()
	if !j.ended() {
		j.stop("exec_cancel", false)
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		j.killOnce.Do(func() { close(j.kill) })
	case <-time.After(stopWait):
		return nil, nil, fmt.Errorf("job %s: not stopped within %v", j.id, stopWait)
	}
	return s.reply(j, from, max)
}

// SessionsInput is the (empty) input of sessions.
type SessionsInput struct{}

// SessionInfo describes one session.
type SessionInfo struct {
	Name     string `json:"name"`
	State    string `json:"state" jsonschema:"up, down or broken"`
	Shell    string `json:"shell"`
	Cwd      string `json:"cwd"`
	CwdBytes string `json:"cwd_bytes,omitempty" jsonschema:"the cwd exactly, base64, when it is not UTF-8 (cwd then shows U+FFFD for each byte that is not)"`
	Busy     bool   `json:"busy" jsonschema:"a command is running in it"`
	Job      string `json:"job,omitempty" jsonschema:"the job of this server running in it"`
	ShellPid int    `json:"shell_pid"`
	Created  string `json:"created"`
	LastUsed string `json:"last_used"`
	Reason   string `json:"reason,omitempty" jsonschema:"why it is broken"`
	Default  bool   `json:"default,omitempty" jsonschema:"the server's default session"`
	Kind     string `json:"kind,omitempty" jsonschema:"exec (a shell for exec) or terminal (a program for the term_ tools)"`
}

// SessionsOutput is the reply of sessions.
type SessionsOutput struct {
	Sessions []SessionInfo `json:"sessions"`
	Default  string        `json:"default" jsonschema:"the session exec uses without one named"`
}

func (s *Server) sessions(ctx context.Context, req *mcp.CallToolRequest, in SessionsInput) (*mcp.CallToolResult, *SessionsOutput, error) {
	d, err := s.daemon(ctx)
	if err != nil {
		return nil, nil, err
	}
	list, err := d.List(ctx)
	if err != nil {
		s.lost(d, err)
		return nil, nil, fmt.Errorf("listing sessions: %w", err)
	}
	running := map[string]string{}
	s.mu.Lock()
	for _, j := range s.jobs {
		if j.session != "" && !j.ended() {
			running[j.session] = j.id
		}
	}
	s.mu.Unlock()
	out := &SessionsOutput{Sessions: []SessionInfo{}, Default: s.cfg.Session}
	var b strings.Builder
	for _, ss := range list {
		out.Sessions = append(out.Sessions, SessionInfo{Name: ss.Name, State: ss.State, Shell: ss.Shell, Cwd: ss.Cwd,
			Busy: ss.Busy, Job: running[ss.Name], ShellPid: ss.ShellPid, Created: ss.Created.UTC().Format(time.RFC3339),
			LastUsed: ss.LastUsed.UTC().Format(time.RFC3339), Reason: strings.ToValidUTF8(ss.Reason, "\uFFFD"), Default: ss.Name == s.cfg.Session, Kind: ss.Kind})
		if si := &out.Sessions[len(out.Sessions)-1]; !utf8.ValidString(si.Cwd) {
			si.CwdBytes = base64.StdEncoding.EncodeToString([]byte(si.Cwd))
			si.Cwd = strings.ToValidUTF8(si.Cwd, "\uFFFD")
		}
	}
	sort.Slice(out.Sessions, func(a, c int) bool { return out.Sessions[a].Name < out.Sessions[c].Name })
	fmt.Fprintf(&b, "%d sessions (default %s)\n", len(out.Sessions), s.cfg.Session)
	for _, si := range out.Sessions {
		busy := ""
		if si.Busy {
			busy = " busy"
			if si.Job != "" {
				busy += " (job " + si.Job + ")"
			}
		}
		fmt.Fprintf(&b, "%s %s%s cwd %s\n", si.Name, si.State, busy, si.Cwd)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
}

// KillSessionInput is the input of kill_session.
type KillSessionInput struct {
	Name string `json:"name" jsonschema:"the session to end (its whole tree) and forget"`
}

// KillSessionOutput is the reply of kill_session.
type KillSessionOutput struct {
	Killed string `json:"killed"`
}

func (s *Server) killSession(ctx context.Context, req *mcp.CallToolRequest, in KillSessionInput) (*mcp.CallToolResult, *KillSessionOutput, error) {
	if err := store.CheckName(in.Name); err != nil {
		return nil, nil, fmt.Errorf("name: %w", err)
	}
	d, err := s.daemon(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := d.Kill(ctx, false, in.Name); err != nil {
		s.lost(d, err)
		return nil, nil, fmt.Errorf("kill_session %s: %w", in.Name, errors.Unwrap(err))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "killed session " + in.Name}}},
		&KillSessionOutput{Killed: in.Name}, nil
}

// NewMCP returns an MCP server with corral's tools, served by s.
func (s *Server) NewMCP() *mcp.Server {
	m := mcp.NewServer(&mcp.Implementation{Name: "corral", Version: s.cfg.Version}, &mcp.ServerOptions{
		Instructions: "corral runs shell commands as contained process trees in persistent sessions " +
			"(cd and export persist). exec returns within yield_ms; a longer command goes on as a job: " +
			"exec_wait for more output, exec_cancel to stop it. Output past max_output_bytes keeps head and " +
			"tail; the whole output is in output_file.",
	})
	mcp.AddTool(m, &mcp.Tool{Name: "exec", InputSchema: inputSchema[ExecInput](), Description: "Run shell code in a persistent session (or a fresh oneshot shell). " +
		"stdin is at EOF unless given; PAGER=cat, GIT_PAGER=cat, GIT_TERMINAL_PROMPT=0. " +
		"Returns status done with outcome and exit_code, or status running with a job id after yield_ms."}, s.exec)
	mcp.AddTool(m, &mcp.Tool{Name: "exec_wait", InputSchema: inputSchema[ExecWaitInput](), Description: "Wait for more output of a running job, or read a finished job's output from any offset."}, s.execWait)
	mcp.AddTool(m, &mcp.Tool{Name: "exec_cancel", InputSchema: inputSchema[ExecCancelInput](), Description: "Stop a job's whole process tree (SIGTERM, grace, SIGKILL); the session is reset as after a timeout."}, s.execCancel)
	mcp.AddTool(m, &mcp.Tool{Name: "sessions", Description: "List every session with its state, cwd, and whether it is busy."}, s.sessions)
	mcp.AddTool(m, &mcp.Tool{Name: "kill_session", Description: "End a session: its shell and everything it started."}, s.killSession)
	s.addTermTools(m)
	m.AddReceivingMiddleware(unknownToolIsToolError(m))
	return m
}

// unknownToolIsToolError answers a call of a tool the server does not have
// with a tool error (isError) rather than a protocol error, so an agent
// sees it.
func unknownToolIsToolError(m *mcp.Server) mcp.Middleware {
	known := map[string]bool{"exec": true, "exec_wait": true, "exec_cancel": true, "sessions": true, "kill_session": true}
	for _, n := range termToolNames {
		known[n] = true
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && !known[p.Name] {
					r := &mcp.CallToolResult{}
					r.SetError(fmt.Errorf("unknown tool %q (corral has exec, exec_wait, exec_cancel, sessions, kill_session, %s)", p.Name, strings.Join(termToolNames, ", ")))
					return r, nil
				}
			}
			return next(ctx, method, req)
		}
	}
}

// env is the environment a new session or oneshot starts with.
func (s *Server) env() []string {
	env := append([]string(nil), s.cfg.Env...)
	if !s.cfg.NoAgentEnv {
		env = append(env, AgentEnv...)
	}
	return env
}

// limitsArg is the limits exec's memory, cpus and pids ask for.
func limitsArg(in ExecInput) (corral.Limits, error) {
	var l corral.Limits
	if in.Memory != "" {
		n, err := parseBytes(in.Memory)
		if err != nil {
			return l, fmt.Errorf("memory: %w", err)
		}
		l.MemoryMax = n
	}
	if in.CPUs != nil {
		v := float64(*in.CPUs)
		if v != v || v < 0.01 || v > 1e6 {
			return l, fmt.Errorf("cpus: want a number of CPUs from 0.01 (the kernel's smallest quota), got %v", v)
		}
		l.CPUs = v
	}
	if in.Pids != nil {
		if *in.Pids <= 0 || *in.Pids > 1<<22 {
			return l, fmt.Errorf("pids: want a positive number of processes, got %d", *in.Pids)
		}
		l.PidsMax = int(*in.Pids)
	}
	return l, nil
}

// parseBytes reads a size: a whole number of bytes, or a number with a
// unit (K, KiB, KB, M, MiB, MB, G, GiB, GB; binary unless it ends in B
// without i).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	mult, ok := map[string]float64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1e3, "m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9}[strings.ToLower(strings.TrimSpace(t[i:]))]
	if err != nil || !ok || v <= 0 || v*mult > 1<<62 || v*mult != float64(int64(v*mult)) {
		return 0, fmt.Errorf("want a positive size like 512MiB or a number of bytes, got %q", s)
	}
	return int64(v * mult), nil
}

// code is the shell code for in: the agent variables and in.Env exported
// (a session keeps them: it is the agent's), then the command. (in.Cwd is
// the request's Cwd, which the daemon enters first.)
func (s *Server) code(in ExecInput) (string, error) {
	var b strings.Builder
	vars := map[string]string{}
	if !s.cfg.NoAgentEnv {
		for _, kv := range AgentEnv {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
	}
	for k, v := range in.Env {
		if !validEnvName(k) {
			return "", fmt.Errorf("env: %q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
		}
		if strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("env %s: a value cannot hold a NUL byte", k)
		}
		vars[k] = v
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		b.WriteString("export")
		for _, k := range keys {
			b.WriteString(" " + k + "=" + quote(vars[k]))
		}
		b.WriteString("\n")
	}
	if in.Cwd != "" && !strings.HasPrefix(in.Cwd, "/") {
		return "", fmt.Errorf("cwd %q: want an absolute path", in.Cwd)
	}
	b.WriteString(in.Command)
	return b.String(), nil
}

// DefaultSession is the session named after dir: its base name and a hash
// of the whole path, so the same project gets the same session across
// restarts and two projects never share one.
func DefaultSession(dir string) string {
	base := filepath.Base(dir)
	var b strings.Builder
	for _, c := range base {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	sum := sha256.Sum256([]byte(dir))
	return "mcp-" + b.String() + "-" + hex.EncodeToString(sum[:4])
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// msArg reads a millisecond argument: def when absent, an error when
// below min or above max (max 0: no bound).
func msArg(name string, v *Int, def time.Duration, min int64, max time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	if *v < 0 {
		return 0, fmt.Errorf("%s must not be negative (got %d)", name, *v)
	}
	if int64(*v) < min {
		return 0, fmt.Errorf("%s must be at least %d (got %d)", name, min, *v)
	}
	if max > 0 && int64(*v) > max.Milliseconds() {
		return 0, fmt.Errorf("%s must be at most %d (got %d)", name, max.Milliseconds(), *v)
	}
	return time.Duration(*v) * time.Millisecond, nil
}

// waitArgs reads the yield_ms and max_output_bytes arguments that exec
// and exec_wait share.
func waitArgs(yieldMs, maxBytes *Int) (yield time.Duration, max int, err error) {
	if yield, err = msArg("yield_ms", yieldMs, DefaultYield, 0, MaxYield); err != nil {
		return 0, 0, err
	}
	if max, err = maxArg(maxBytes); err != nil {
		return 0, 0, err
	}
	return yield, max, nil
}

func maxArg(v *Int) (int, error) {
	if v == nil {
		return DefaultMaxOutput, nil
	}
	if *v < 100 || *v > MaxReplyBytes {
		return 0, fmt.Errorf("max_output_bytes must be between 100 and %d (got %d)", MaxReplyBytes, *v)
	}
	return int(*v), nil
}
