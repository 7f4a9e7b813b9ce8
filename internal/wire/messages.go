package wire

import "fmt"

// Hello is the client's first frame.
type Hello struct {
	Protocol string `json:"protocol"` // "corral"
	Versions []int  `json:"versions"`
}

// Protocol is Hello.Protocol.
const Protocol = "corral"

// Welcome is the daemon's answer to Hello.
type Welcome struct {
	Version int `json:"version"`
	Pid     int `json:"pid"`
}

// Negotiate picks the version to speak with a client that sent h: the
// highest one both speak, or an error of kind unsupported_version.
func Negotiate(h Hello) (int, *Error) {
	if h.Protocol != Protocol {
		return 0, &Error{Kind: KindVersion, Message: fmt.Sprintf("not a corral client (protocol %q)", h.Protocol)}
	}
	best := 0
	for _, v := range h.Versions {
		if v <= Version && v > best {
			best = v
		}
	}
	if best == 0 {
		return 0, &Error{Kind: KindVersion, Message: fmt.Sprintf("no protocol version in common: the client speaks %v, this daemon 1 to %d; upgrade the older of the two", h.Versions, Version)}
	}
	return best, nil
}

// Call names.
const (
	CallExec   = "exec"
	CallList   = "list"
	CallKill   = "kill"
	CallStatus = "status"
	CallStop   = "stop"
)

// Call is one call.
type Call struct {
	Call string `json:"call"`
	Exec *Exec  `json:"exec,omitempty"`
	Kill *Kill  `json:"kill,omitempty"`
	// Resume is a resume call's job and offset (jobs.go).
	Resume *Resume `json:"resume,omitempty"`
	// Term is the terminal calls' arguments (term.go).
	Term *Term `json:"term,omitempty"`
}

// Exec is what to run, and where.
type Exec struct {
	// Session names the session (created on first use); "" with Oneshot.
	Session string `json:"session,omitempty"`
	// Command is shell code.
	Command string `json:"command"`
	// Oneshot runs the command in a fresh contained shell instead.
	Oneshot bool `json:"oneshot,omitempty"`
	// Dir and Env are where a session created by this command starts, and
	// where a oneshot command runs: the client's working directory and
	// environment.
	Dir string   `json:"dir,omitempty"`
	Env []string `json:"env,omitempty"`
	// Umask is the client's umask, that of a session this command
	// creates (absent: the daemon's own; at most 0777).
	Umask *uint32 `json:"umask,omitempty"`
	// Cwd, if set, is entered before the command (an absolute path): in a
	// session the cd persists. A Cwd that cannot be entered fails the
	// command before it starts (outcome start_failed).
	Cwd string `json:"cwd,omitempty"`
	// CommandBytes, DirBytes, CwdBytes and EnvBytes (version 2) carry
	// the command, dir, cwd and environment entries that are not UTF-8,
	// exactly (see bytes.go): EnvBytes[i] is Env[i], which is then "".
	CommandBytes []byte         `json:"command_bytes,omitempty"`
	DirBytes     []byte         `json:"dir_bytes,omitempty"`
	CwdBytes     []byte         `json:"cwd_bytes,omitempty"`
	EnvBytes     map[int][]byte `json:"env_bytes,omitempty"`
	// Stdin says whether stdin frames follow (else the command reads EOF).
	Stdin bool `json:"stdin,omitempty"`
	// BackgroundOutput runs nothing: the session's kept background
	// output (what its background jobs wrote after their command ended)
	// comes back as this call's output, and is forgotten.
	BackgroundOutput bool `json:"background_output,omitempty"`
	// Merge asks for stdout and stderr as one stream, in the order the
	// command wrote them (the client sends both to one place): all output
	// then comes in stdout frames and counts as stdout.
	Merge bool `json:"merge,omitempty"`
	// TimeoutMs bounds the command (0: none); MaxOutput its stdout+stderr
	// in bytes (0: none).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	MaxOutput int64 `json:"max_output,omitempty"`
	// GraceMs, if not 0, replaces the session's grace period for this
	// command (negative: SIGKILL at once); StopSignal, if not 0, is the
	// first signal a timeout or cancel sends instead of SIGTERM.
	GraceMs    int64 `json:"grace_ms,omitempty"`
	StopSignal int   `json:"stop_signal,omitempty"`
	// Detach keeps the command going if the client goes away, its
	// output kept for a resume call (jobs.go).
	Detach bool `json:"detach,omitempty"`
	// Limits: the resource limits of the session this command creates
	// (or of a oneshot's tree); for an existing session, a change made
	// before the command runs. A positive value sets a limit (bytes,
	// CPUs, processes), -1 removes it, 0 (absent) leaves it.
	Limits
}

// Limits are a session's resource limits: cgroup memory.max, memory.high,
// cpu.max (as CPUs) and pids.max.
type Limits struct {
	MemoryMax  int64   `json:"memory_max,omitempty"`
	MemoryHigh int64   `json:"memory_high,omitempty"`
	CPUs       float64 `json:"cpus,omitempty"`
	PidsMax    int     `json:"pids_max,omitempty"`
}

// Cancel is the payload of a cancel frame.
type Cancel struct {
	Signal int `json:"signal,omitempty"`
}

// Kill ends sessions.
type Kill struct {
	Names []string `json:"names,omitempty"`
	All   bool     `json:"all,omitempty"`
}

// Killed is the reply to Kill.
type Killed struct {
	Killed []string `json:"killed"`
}

// Session describes one session as the daemon lists it.
type Session struct {
	Name string `json:"name"`
	// State is up, down, broken or recovering.
	State        string `json:"state"`
	Shell        string `json:"shell"`
	Cwd          string `json:"cwd"`
	CwdBytes     []byte `json:"cwd_bytes,omitempty"` // Cwd exactly, when it is not UTF-8 (version 2)
	CreatedUnix  int64  `json:"created_unix"`
	LastUsedUnix int64  `json:"last_used_unix"`
	// ShellPid is the pid of the session's shell, which holds the session
	// (0 when it is down).
	ShellPid int  `json:"shell_pid"`
	Busy     bool `json:"busy,omitempty"`
	// Reason says why a session is broken or still recovering.
	Reason string `json:"reason,omitempty"`
	// Limits are the session's resource limits (absent: none).
	Limits *Limits `json:"limits,omitempty"`
	// MemoryBytes and Pids are what the session's shell tree holds now
	// (memory.current, pids.current), present only when measured (a
	// live shell, the controller delegated); Accounting says why one is
	// absent for a live shell.
	MemoryBytes *int64 `json:"memory_bytes,omitempty"`
	Pids        *int64 `json:"pids,omitempty"`
	Accounting  string `json:"accounting,omitempty"`
	// Kind is exec or terminal (absent from older daemons: exec); Term
	// describes a terminal session (term.go).
	Kind string    `json:"kind,omitempty"`
	Term *TermInfo `json:"term,omitempty"`
	// BackgroundBytes counts the background output the session keeps
	// (Exec.BackgroundOutput takes it).
	BackgroundBytes int64 `json:"background_bytes,omitempty"`
}

// Sessions is the reply to List.
type Sessions struct {
	Sessions []Session `json:"sessions"`
}

// Status describes the daemon.
type Status struct {
	Pid         int    `json:"pid"`
	Socket      string `json:"socket"`
	StateDir    string `json:"state_dir"`
	Sessions    int    `json:"sessions"`
	StartedUnix int64  `json:"started_unix"`
	// Isolation is how the daemon contains the shells of the sessions it
	// creates and its oneshots.
	Isolation string `json:"isolation"`
}
