package corral

import (
	"encoding/json"
	"time"
)

// Outcome classifies how a run ended. Exactly one applies.
type Outcome string

const (
	// OutcomeExited: the root exited by itself; ExitCode says how.
	OutcomeExited Outcome = "exited"
	// OutcomeSignaled: the root was killed by a signal corral did not send.
	OutcomeSignaled Outcome = "signaled"
	// OutcomeTimeout: the deadline passed and corral stopped the tree.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeCancelled: the caller cancelled and corral stopped the tree.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeOutputLimit: stdout+stderr passed MaxOutput; the tree was
	// killed and the output cut at the limit.
	OutcomeOutputLimit Outcome = "output_limit"
	// OutcomeStdioHeld: with KeepDetached, a descendant still held stdout
	// or stderr when the drain bound passed; it was killed.
	OutcomeStdioHeld Outcome = "stdio_held"
	// OutcomeOOM: the root was killed by the kernel's OOM killer (the
	// tree reached its memory limit: memory.events counted an OOM kill).
	OutcomeOOM Outcome = "oom"
	// OutcomeStartFailed: nothing ran.
	OutcomeStartFailed Outcome = "start_failed"
)

// Result describes one run. Every field is final when Run returns.
type Result struct {
	Outcome Outcome
	// ExitCode is the root's exit status, -1 if it did not exit by itself
	// (killed, or never started).
	ExitCode int
	// Signal is the signal that killed the root, 0 if none.
	Signal int

	// The tree's identity (zero if nothing started).
	Isolation string
	Pid       int
	Pgid      int
	Cgroup    string

	StartedAt time.Time
	EndedAt   time.Time
	Duration  time.Duration
	// FirstOutput is the time from start to the first byte read from
	// stdout or stderr; -1 if there was none.
	FirstOutput time.Duration
	StdoutBytes int64
	StderrBytes int64

	// DescendantsKilled counts the processes other than the root that
	// corral stopped: those still running when the root exited (the
	// default policy), or found in the tree when a timeout, a cancel or
	// the output limit stopped it.
	DescendantsKilled int
	// ProcessesStopped counts every process corral stopped, the root
	// included when it was stopped too, whatever the reason.
	ProcessesStopped int
	// Detached lists the pids released under KeepDetached.
	Detached []int
	// StdioHeldBy lists the pids that held stdio past the drain bound.
	StdioHeldBy []int
	// DrainCutOff: output was still being held open when the drain bound
	// passed, and reading stopped there.
	DrainCutOff bool
	// KillFailed: the tree could not be confirmed gone.
	KillFailed bool
	// OutputError is the first error writing to the caller's Stdout or
	// Stderr; output after it was discarded.
	OutputError string
	// Error explains a start failure or a lifecycle failure.
	Error string

	// Accounting, read from the tree's cgroup before it was removed. A
	// nil field was not measured (no cgroup, a controller not delegated):
	// never a zero standing in for a number; Accounting says why.
	//
	// For a command of a session (package session), whose shell's tree
	// lives on, they are read before and after the command (Meter): the
	// CPU times and OOMKills are what the session's whole tree used
	// during the command (background jobs included); PidsPeak, and
	// MemoryPeakBytes unless the kernel resets memory.peak per reader
	// (Linux 6.12 and later), are the session's peaks since its shell
	// started, and Accounting says so.
	MemoryPeakBytes *int64   // memory.peak
	CPUUserMs       *float64 // cpu.stat user_usec, in ms
	CPUSystemMs     *float64 // cpu.stat system_usec, in ms
	CPUThrottledMs  *float64 // cpu.stat throttled_usec, in ms
	PidsPeak        *int64   // pids.peak
	OOMKills        *int64   // memory.events oom_kill
	// Accounting says why the fields above that are nil are absent
	// ("cgroup v2 memory controller not delegated", "pgroup
	// isolation"), and for a session command which peaks are the
	// session's ("pids_peak is the session's since its shell started");
	// "" when there is nothing to say, or nothing ran.
	Accounting string
}

// NewResult returns the result of a run in the tree id before anything is
// known of how it went: no outcome yet, ExitCode -1, FirstOutput -1, and
// the tree's identity (Isolation, Pid, Pgid, Cgroup; none for a zero id).
// It is the one place a result takes its identity from an Identity: a
// Tree's results and a session's command results (run inside its shell's
// tree) start here.
func NewResult(id Identity) *Result {
	return &Result{ExitCode: -1, FirstOutput: -1,
		Isolation: string(id.Isolation), Pid: id.Pid, Pgid: id.Pgid, Cgroup: id.Cgroup}
}

// MarshalJSON writes the result as one object with snake_case fields and
// durations in milliseconds.
func (r *Result) MarshalJSON() ([]byte, error) {
	var first *float64
	if r.FirstOutput >= 0 {
		v := ms(r.FirstOutput)
		first = &v
	}
	var started, ended *time.Time
	if !r.StartedAt.IsZero() {
		started = &r.StartedAt
	}
	if !r.EndedAt.IsZero() {
		ended = &r.EndedAt
	}
	return json.Marshal(struct {
		Outcome           Outcome    `json:"outcome"`
		ExitCode          int        `json:"exit_code"`
		Signal            int        `json:"signal"`
		Pid               int        `json:"pid"`
		Pgid              int        `json:"pgid"`
		Cgroup            string     `json:"cgroup"`
		Isolation         string     `json:"isolation"`
		StartedAt         *time.Time `json:"started_at"`
		EndedAt           *time.Time `json:"ended_at"`
		DurationMs        float64    `json:"duration_ms"`
		FirstOutputMs     *float64   `json:"first_output_ms"`
		StdoutBytes       int64      `json:"stdout_bytes"`
		StderrBytes       int64      `json:"stderr_bytes"`
		DescendantsKilled int        `json:"descendants_killed"`
		ProcessesStopped  int        `json:"processes_stopped"`
		Detached          []int      `json:"detached"`
		StdioHeldBy       []int      `json:"stdio_held_by"`
		DrainCutOff       bool       `json:"drain_cut_off"`
		KillFailed        bool       `json:"kill_failed"`
		OutputError       string     `json:"output_error,omitempty"`
		Error             string     `json:"error,omitempty"`
		MemoryPeakBytes   *int64     `json:"memory_peak_bytes,omitempty"`
		CPUUserMs         *float64   `json:"cpu_user_ms,omitempty"`
		CPUSystemMs       *float64   `json:"cpu_system_ms,omitempty"`
		CPUThrottledMs    *float64   `json:"cpu_throttled_ms,omitempty"`
		PidsPeak          *int64     `json:"pids_peak,omitempty"`
		OOMKills          *int64     `json:"oom_kills,omitempty"`
		Accounting        string     `json:"accounting,omitempty"`
	}{
		r.Outcome, r.ExitCode, r.Signal, r.Pid, r.Pgid, r.Cgroup, r.Isolation,
		started, ended, ms(r.Duration), first, r.StdoutBytes, r.StderrBytes,
		r.DescendantsKilled, r.ProcessesStopped, nonNil(r.Detached), nonNil(r.StdioHeldBy),
		r.DrainCutOff, r.KillFailed, r.OutputError, r.Error,
		r.MemoryPeakBytes, r.CPUUserMs, r.CPUSystemMs, r.CPUThrottledMs, r.PidsPeak, r.OOMKills, r.Accounting,
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}
