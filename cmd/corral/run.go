package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/record"
	"github.com/corral-dev/corral/internal/statedir"
)

type runFlags struct {
	timeout, grace, drain time.Duration
	maxOutput             string
	keepDetached          bool
	isolation             string
	isolationSet          bool // --isolation was given: it overrides $CORRAL_ISOLATION
	result                string
	noRecord              bool
	signal                string
	memory, memoryHigh    string
	cpus                  float64
	pids                  int
}

func runCommand(stdin *os.File, stdout, stderr io.Writer) *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARGS...]",
		Short: "Run one command as a contained process tree",
		Long: `Run COMMAND as a contained process tree and exit with its status.

Output streams through as it is produced. Every process the command starts
is stopped when it ends (or is released with --keep-detached), a timeout or
a signal to corral stops the whole tree (that same signal first: SIGINT,
SIGTERM or SIGHUP; then --grace, then SIGKILL; --signal chooses what a
--timeout sends first, SIGTERM by default),
and a record of the tree is kept in the state directory while it runs so
that 'corral reap' can kill it if corral itself is killed.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.isolationSet = cmd.Flags().Changed("isolation")
			return runMain(&f, args, stdin, stdout, stderr)
		},
	}
	fl := c.Flags()
	fl.SetInterspersed(false)
	durationFlag(fl, &f.timeout, "timeout", 0, "stop the tree after this long (0: never)")
	durationFlag(fl, &f.grace, "grace", corral.DefaultGrace, "time between the first signal and SIGKILL when stopping")
	durationFlag(fl, &f.drain, "drain", corral.DefaultDrain, "how long to read output held open after the command exits")
	fl.StringVar(&f.maxOutput, "max-output", "", "kill the tree once stdout+stderr pass this size (e.g. 10MiB)")
	fl.BoolVar(&f.keepDetached, "keep-detached", false, "let descendants that released stdio outlive the command")
	fl.StringVar(&f.isolation, "isolation", "auto", "containment: auto, cgroup, pgroup (Linux), job (Windows); default $"+isolationEnv+", else auto")
	fl.StringVar(&f.result, "result", "", "write the result as one JSON object to this file ('-': stdout, after the command's output)")
	fl.StringVar(&f.signal, "signal", "TERM", "the first signal a timeout sends the tree (a name like INT, HUP, or a number); a signal to corral is passed on as itself")
	fl.BoolVar(&f.noRecord, "no-record", false, "keep no crash record (then 'corral reap' cannot find the tree)")
	fl.StringVar(&f.memory, "memory", "", "memory limit of the whole tree (cgroup memory.max, e.g. 512MiB); past it the OOM killer ends it (exit 137)")
	fl.StringVar(&f.memoryHigh, "memory-high", "", "memory the tree is throttled and reclaimed above (cgroup memory.high)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU limit of the whole tree in CPUs, e.g. 0.5 or 2 (cgroup cpu.max)")
	fl.IntVar(&f.pids, "pids", 0, "most processes the tree may have at once (cgroup pids.max)")
	return c
}

func runMain(f *runFlags, args []string, stdin *os.File, stdout, stderr io.Writer) error {
	cmd := corral.Command(args[0], args[1:]...)
	switch {
	case f.timeout < 0:
		return usageErr("--timeout must not be negative")
	case f.grace < 0:
		return usageErr("--grace must not be negative")
	case f.drain <= 0:
		return usageErr("--drain must be positive")
	}
	if f.signal != "TERM" {
		sig, err := parseSignal(f.signal)
		if err != nil {
			return usageErr("%v", err)
		}
		cmd.StopSignal = sig
	}
	cmd.Timeout, cmd.Drain = f.timeout, f.drain
	cmd.Grace = f.grace
	if f.grace == 0 {
		cmd.Grace = -1 // --grace 0: kill at once
	}
	if f.maxOutput != "" {
		n, err := parseSize(f.maxOutput)
		if err != nil || n <= 0 {
			return usageErr("--max-output: want a positive size like 10MiB, got %q", f.maxOutput)
		}
		cmd.MaxOutput = n
	}
	if f.keepDetached {
		cmd.Descendants = corral.KeepDetached
	}
	if err := setLimits(f, cmd); err != nil {
		return err
	}
	iso, err := isolationOf(f.isolation, f.isolationSet)
	if err != nil {
		return err
	}
	cmd.Isolation = iso
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = merged(stdout, stderr)
	if f.maxOutput == "" {
		// (--max-output keeps pipes: a terminal's output processing
		// would count bytes the command did not write.)
		defer outputTTY(cmd, stdout)()
	}
	// On a terminal, hand it to the command while it runs, or a command
	// that reads it would be stopped (SIGTTIN) for reading from a
	// background group.
	cmd.Foreground = stdin != nil && inForeground(stdin)

	// Open the result file first: a bad path must fail before anything runs.
	resultFile, err := openResult(f.result, stdout)
	if err != nil {
		return err
	}
	if resultFile != nil {
		defer resultFile.Close()
	}
	var store *record.Store
	if !f.noRecord {
		dir, err := statedir.Path()
		if err == nil {
			dir, err = statedir.Ensure(dir, "runs")
		}
		if err != nil {
			return &exitError{code: exitInternal, msg: err.Error()}
		}
		store = &record.Store{Dir: dir}
	}
	var tracker *record.Tracker
	if store != nil {
		tracker = store.Track(args)
		cmd.OnStart = tracker.OnStart
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	got, escalate, stopSignals := catchSignals(cancel)
	cmd.Escalate = escalate
	// A closed stdout must not kill corral with SIGPIPE and orphan the
	// tree. Catch it rather than ignore it: an ignored signal stays
	// ignored across exec, and the command must still die of SIGPIPE
	// when it writes to the closed pipe, as it would writing directly.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	res, err := cmd.Run(ctx)
	stopSignals()
	// A SIGPIPE caught here was corral's own write to a stdout or stderr
	// whose reader went away: a plain tool stays silent about that.
	brokenPipe := len(pipes) > 0

	if tracker != nil {
		if rerr := tracker.Done(res); rerr != nil {
			fmt.Fprintf(stderr, "corral: %v\n", rerr)
		}
	}
	writeResult(f.result, resultFile, stdout, stderr, res)
	shown := *res
	if brokenPipe {
		shown.OutputError = ""
	}
	return exitForRun(&shown, err, got(), cmd.MemoryMax > 0 || cmd.MemoryHigh > 0 || cmd.CPUs > 0 || cmd.PidsMax > 0)
}

// catchSignals turns SIGINT, SIGTERM and SIGHUP into a cancellation of the
// run (with the grace period); a second SIGINT closes escalate, which kills
// at once. got reports the first signal received.
func catchSignals(cancel context.CancelCauseFunc) (got func() syscall.Signal, escalate <-chan struct{}, stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	esc := make(chan struct{})
	var mu sync.Mutex
	var first syscall.Signal
	var escOnce sync.Once
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				sig := s.(syscall.Signal)
				mu.Lock()
				if first == 0 {
					first = sig
					mu.Unlock()
					// The tree gets the signal corral got: a SIGINT
					// reaches Python as KeyboardInterrupt, as from
					// a terminal.
					cancel(&corral.StopCause{Signal: sig})
					continue
				}
				mu.Unlock()
				if sig == syscall.SIGINT {
					escOnce.Do(func() { close(esc) })
				}
			}
		}
	}()
	return func() syscall.Signal {
			mu.Lock()
			defer mu.Unlock()
			return first
		}, esc, func() {
			signal.Stop(ch)
			close(done)
		}
}

// exitFor maps a result to corral run's exit code, printing one line on
// stderr for anything that is not the command's own doing.
func exitFor(res *corral.Result, err error, sig syscall.Signal) error {
	return exitForRun(res, err, sig, false)
}

// exitForRun is exitFor for a run that asked for resource limits if
// limited: an isolation failure then gets no advice to use pgroup, which
// cannot limit.
func exitForRun(res *corral.Result, err error, sig syscall.Signal, limited bool) error {
	var msg string
	code := 0
	switch res.Outcome {
	case corral.OutcomeExited:
		code = res.ExitCode
		if code < 0 { // exited, status unknown (a taken-over session's shell)
			code, msg = exitInternal, res.Error
		}
	case corral.OutcomeSignaled:
		code = 128 + res.Signal
	case corral.OutcomeTimeout:
		code, msg = exitTimeout, "timed out; the tree was stopped"
	case corral.OutcomeCancelled:
		code, msg = 128+int(sig), fmt.Sprintf("stopped on %v", sig)
		if sig == 0 {
			// Not our signal: the daemon ended it (the session was
			// killed, or the daemon let it go while stopping).
			code, msg = exitInternal, "cancelled: "+res.Error
		}
	case corral.OutcomeOutputLimit:
		code, msg = exitOutputLimit, "output limit reached; the tree was killed"
	case corral.OutcomeOOM:
		code, msg = 128+res.Signal, "killed by the kernel's OOM killer: the tree reached its memory limit"
		if res.MemoryPeakBytes != nil {
			msg += fmt.Sprintf(" (memory peak %d bytes)", *res.MemoryPeakBytes)
		}
	case corral.OutcomeStdioHeld:
		code, msg = exitStdioHeld, fmt.Sprintf("%s %s held stdout/stderr past the drain bound; killed", plural(len(res.StdioHeldBy), "process", "processes"), pidList(res.StdioHeldBy))
	case corral.OutcomeStartFailed:
		code = exitInternal
		msg = res.Error
		switch {
		case errors.Is(err, corral.ErrIsolation) && limited:
			// Not the command's failure; and pgroup cannot limit.
		case errors.Is(err, corral.ErrIsolation):
			// Not the command's failure, whatever it wraps.
			msg += "; to run without a cgroup: --isolation pgroup or " + isolationEnv + "=pgroup"
		case errors.Is(err, corral.ErrNotFound):
			code = exitNotFound
		case errors.Is(err, corral.ErrNotExec):
			code = exitNotExec
		}
	}
	if res.DrainCutOff {
		msg = joinMsg(msg, fmt.Sprintf("output still held open after %v; stopped reading (drain cut off)", "--drain"))
	}
	if res.KillFailed {
		code = exitInternal
		msg = joinMsg(msg, "the tree could not be confirmed gone: "+res.Error+"; its record is kept for 'corral reap'")
	}
	if res.OutputError != "" {
		msg = joinMsg(msg, "writing output: "+res.OutputError)
	}
	if msg == "" && res.Error != "" {
		// Any other lifecycle failure, shown even when the command
		// itself succeeded.
		msg = res.Error
	}
	if code == 0 && msg == "" {
		return nil
	}
	return &exitError{code: code, msg: msg}
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// setLimits sets the tree's resource limits from the flags.
func setLimits(f *runFlags, cmd *corral.Cmd) error {
	for _, l := range []struct {
		flag, v string
		to      *int64
	}{{"--memory", f.memory, &cmd.MemoryMax}, {"--memory-high", f.memoryHigh, &cmd.MemoryHigh}} {
		if l.v == "" {
			continue
		}
		n, err := parseSize(l.v)
		if err != nil || n <= 0 {
			return usageErr("%s: want a positive size like 512MiB, got %q", l.flag, l.v)
		}
		*l.to = n
	}
	switch {
	case f.cpus < 0:
		return usageErr("--cpus must not be negative")
	case f.cpus > 0 && f.cpus < 0.01:
		return usageErr("--cpus: the kernel's smallest quota is 0.01 CPUs")
	case f.pids < 0:
		return usageErr("--pids must not be negative")
	}
	cmd.CPUs, cmd.PidsMax = f.cpus, f.pids
	return nil
}
