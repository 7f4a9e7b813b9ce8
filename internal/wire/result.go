package wire

import (
	"strings"
	"time"

	"github.com/corral-dev/corral"
)

// Result is a command's result on the wire: every field of corral.Result,
// with times as Unix nanoseconds and durations as nanoseconds (so that
// another language needs no time format), plus what the session says after
// the command.
type Result struct {
	Outcome  string `json:"outcome"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`

	Isolation string `json:"isolation,omitempty"`
	Pid       int    `json:"pid,omitempty"`
	Pgid      int    `json:"pgid,omitempty"`
	Cgroup    string `json:"cgroup,omitempty"`

	// StartedUnixNano and EndedUnixNano are 0 when nothing started.
	StartedUnixNano int64 `json:"started_unix_nano,omitempty"`
	EndedUnixNano   int64 `json:"ended_unix_nano,omitempty"`
	DurationNs      int64 `json:"duration_ns"`
	// FirstOutputNs is -1 when there was no output.
	FirstOutputNs int64 `json:"first_output_ns"`
	StdoutBytes   int64 `json:"stdout_bytes"`
	StderrBytes   int64 `json:"stderr_bytes"`

	DescendantsKilled int    `json:"descendants_killed,omitempty"`
	ProcessesStopped  int    `json:"processes_stopped,omitempty"`
	Detached          []int  `json:"detached,omitempty"`
	StdioHeldBy       []int  `json:"stdio_held_by,omitempty"`
	DrainCutOff       bool   `json:"drain_cut_off,omitempty"`
	KillFailed        bool   `json:"kill_failed,omitempty"`
	OutputError       string `json:"output_error,omitempty"`
	Error             string `json:"error,omitempty"`
	// ErrorBytes is Error exactly when it is not UTF-8 (it names a
	// path that is not: version 2).
	ErrorBytes []byte `json:"error_bytes,omitempty"`

	// Accounting: null when not measured (Accounting says why).
	MemoryPeakBytes *int64   `json:"memory_peak_bytes,omitempty"`
	CPUUserMs       *float64 `json:"cpu_user_ms,omitempty"`
	CPUSystemMs     *float64 `json:"cpu_system_ms,omitempty"`
	CPUThrottledMs  *float64 `json:"cpu_throttled_ms,omitempty"`
	PidsPeak        *int64   `json:"pids_peak,omitempty"`
	OOMKills        *int64   `json:"oom_kills,omitempty"`
	Accounting      string   `json:"accounting,omitempty"`

	// Cwd is the session's working directory after the command ("" for a
	// oneshot, or a session whose shell is gone).
	Cwd string `json:"cwd,omitempty"`
	// CwdBytes is Cwd exactly when it is not UTF-8 (version 2).
	CwdBytes []byte `json:"cwd_bytes,omitempty"`
	// StateNotSaved, if not "", says why the session's state after the
	// command (cwd, exported environment) could not be recorded: the live
	// shell has it, a reboot or a daemon crash may lose it.
	StateNotSaved string `json:"state_not_saved,omitempty"`
	// Limits are the session's resource limits after the command (absent:
	// none); LimitsChanged says this command changed them.
	Limits        *Limits `json:"limits,omitempty"`
	LimitsChanged bool    `json:"limits_changed,omitempty"`
}

// FromResult is r on the wire.
func FromResult(r *corral.Result) *Result {
	w := &Result{
		Outcome: string(r.Outcome), ExitCode: r.ExitCode, Signal: r.Signal,
		Isolation: r.Isolation, Pid: r.Pid, Pgid: r.Pgid, Cgroup: r.Cgroup,
		StartedUnixNano: unixNano(r.StartedAt), EndedUnixNano: unixNano(r.EndedAt),
		DurationNs: int64(r.Duration), FirstOutputNs: -1,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		DescendantsKilled: r.DescendantsKilled, ProcessesStopped: r.ProcessesStopped,
		Detached: r.Detached, StdioHeldBy: r.StdioHeldBy,
		DrainCutOff: r.DrainCutOff, KillFailed: r.KillFailed, OutputError: r.OutputError, Error: r.Error,
		MemoryPeakBytes: r.MemoryPeakBytes, CPUUserMs: r.CPUUserMs, CPUSystemMs: r.CPUSystemMs,
		CPUThrottledMs: r.CPUThrottledMs, PidsPeak: r.PidsPeak, OOMKills: r.OOMKills, Accounting: r.Accounting,
	}
	if r.FirstOutput >= 0 {
		w.FirstOutputNs = int64(r.FirstOutput)
	}
	w.ErrorBytes = bytesOf(r.Error)
	return w
}

// Corral is w as a corral.Result.
func (w *Result) Corral() *corral.Result {
	r := &corral.Result{
		Outcome: corral.Outcome(w.Outcome), ExitCode: w.ExitCode, Signal: w.Signal,
		Isolation: w.Isolation, Pid: w.Pid, Pgid: w.Pgid, Cgroup: w.Cgroup,
		StartedAt: fromUnixNano(w.StartedUnixNano), EndedAt: fromUnixNano(w.EndedUnixNano),
		Duration: time.Duration(w.DurationNs), FirstOutput: -1,
		StdoutBytes: w.StdoutBytes, StderrBytes: w.StderrBytes,
		DescendantsKilled: w.DescendantsKilled, ProcessesStopped: w.ProcessesStopped,
		Detached: w.Detached, StdioHeldBy: w.StdioHeldBy,
		DrainCutOff: w.DrainCutOff, KillFailed: w.KillFailed, OutputError: w.OutputError, Error: textOf(w.Error, w.ErrorBytes),
		MemoryPeakBytes: w.MemoryPeakBytes, CPUUserMs: w.CPUUserMs, CPUSystemMs: w.CPUSystemMs,
		CPUThrottledMs: w.CPUThrottledMs, PidsPeak: w.PidsPeak, OOMKills: w.OOMKills, Accounting: w.Accounting,
	}
	if w.FirstOutputNs >= 0 {
		r.FirstOutput = time.Duration(w.FirstOutputNs)
	}
	return r
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// LimitsOf is l on the wire (nil for none).
func LimitsOf(l corral.Limits) *Limits {
	if l.IsZero() {
		return nil
	}
	return &Limits{MemoryMax: l.MemoryMax, MemoryHigh: l.MemoryHigh, CPUs: l.CPUs, PidsMax: l.PidsMax}
}

// Corral is l as corral.Limits (zero for nil).
func (l *Limits) Corral() corral.Limits {
	if l == nil {
		return corral.Limits{}
	}
	return corral.Limits{MemoryMax: l.MemoryMax, MemoryHigh: l.MemoryHigh, CPUs: l.CPUs, PidsMax: l.PidsMax}
}

// SetUsage fills s's usage from u (nil: no shell held, nothing measured).
// Its accounting gives the reasons u has for memory and pids, the two
// things a listing shows.
func SetUsage(s *Session, u *corral.Usage) {
	if u == nil {
		return
	}
	s.MemoryBytes, s.Pids = u.MemoryBytes, u.Pids
	if u.MemoryBytes != nil && u.Pids != nil {
		return
	}
	var why []string
	for _, r := range strings.Split(u.Missing, "; ") {
		if strings.Contains(r, "memory") && u.MemoryBytes == nil || strings.Contains(r, "pids") && u.Pids == nil || strings.Contains(r, "isolation") {
			why = append(why, r)
		}
	}
	if len(why) == 0 {
		why = append(why, "not measured")
	}
	s.Accounting = strings.Join(why, "; ")
}
