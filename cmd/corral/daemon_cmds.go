package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/daemon"
	"github.com/corral-dev/corral/internal/daemon/server"
	"github.com/corral-dev/corral/internal/statedir"
	"github.com/corral-dev/corral/internal/store"
)

func stateDir() (string, error) {
	dir, err := statedir.Path()
	if err == nil {
		dir, err = statedir.Ensure(dir)
	}
	if err != nil {
		return "", &exitError{code: exitInternal, msg: err.Error()}
	}
	return dir, nil
}

// callErr maps the error of a call to the daemon to an exit code and one
// line.
func callErr(err error) error {
	code, msg := exitInternal, err.Error()
	switch {
	case errors.Is(err, client.ErrBadRequest):
		code = exitUsage
	case errors.Is(err, client.ErrNotFound):
		code = 1
	case errors.Is(err, client.ErrDaemonStopping) && !strings.HasPrefix(msg, client.ErrLost.Error()):
		// The daemon stopped under the call (a running command may have
		// run: the next daemon cancels it).
		msg = "lost the daemon: " + msg
	}
	return &exitError{code: code, msg: msg, usage: code == exitUsage}
}

// connect dials the daemon of the state directory, starting one (this
// binary) if none answers and start is set; or the remote daemon of
// --host (never started), with "" for the directory.
func connect(start bool) (*client.Client, string, error) {
	if host, tdir, err := remoteHost(); err != nil || host != "" {
		if err != nil {
			return nil, "", err
		}
		c, err := dialRemote(host, tdir)
		return c, "", err
	}
	dir, err := stateDir()
	if err != nil {
		return nil, "", err
	}
	c, err := dial(dir, start)
	return c, dir, err
}

// dial dials the daemon of dir, starting one (this binary) if none
// answers and start is set.
func dial(dir string, start bool) (*client.Client, error) {
	var opts []client.Option
	if start {
		exe, err := os.Executable()
		if err != nil {
			return nil, &exitError{code: exitInternal, msg: "starting the daemon: " + err.Error()}
		}
		opts = append(opts, client.StartDaemon(exe))
	}
	c, err := client.Dial(context.Background(), dir, opts...)
	if err != nil {
		return nil, &exitError{code: exitInternal, msg: err.Error()}
	}
	return c, nil
}

func daemonCommand(stdout io.Writer) *cobra.Command {
	var asJSON bool
	var listen string
	var ops daemonOps
	c := &cobra.Command{
		Use:   "daemon [stop|status]",
		Short: "Run the corral daemon in the foreground, stop it, or show its status",
		Long: `Run the daemon that serves named sessions (in the foreground), or stop or
describe the running one. $CORRAL_ISOLATION (auto, cgroup, pgroup) selects
how its sessions' shells are contained. Stopping the daemon leaves every
session running:
each session's shell holds its own command channel and output (FIFOs in the
state directory), and the next daemon takes it over.

Remote clients: --listen HOST:PORT --tls DIR also serves them over TCP with
TLS 1.3, each with a client certificate signed by DIR's CA (corral tls init
DIR made it; corral tls issue DIR --client NAME makes more; corral tls
revoke DIR NAME revokes one, from the next connection on). Plaintext, no
certificate, another CA, expired or revoked certificates are refused and
logged with the reason. A read-only identity (tls issue --read-only) may
list sessions and see the status, not exec, kill or stop. A remote client
that goes away has its command's tree stopped; a peer that vanishes (a
cable cut) is noticed within 10s. The unix socket keeps serving beside it.

daemon status and daemon stop take --host HOST:PORT --tls DIR to reach a
remote daemon.

On SIGTERM (as systemd, Kubernetes and Nomad stop a service) the daemon
drains: it takes no new call (a client is told the daemon is stopping),
lets running commands finish for up to --drain-timeout (a second SIGTERM
stops waiting), then exits; what still runs goes on in its session.
--health ADDR serves /healthz, /readyz and Prometheus /metrics for such an
engine (see deploy/ in the source).`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"stop", "status"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if target.host != "" {
					return usageErr("daemon: --host is for daemon status and stop; to serve remote clients, give --listen HOST:PORT --tls DIR")
				}
				if listen != "" && target.tlsDir == "" {
					return usageErr("daemon: --listen %s needs --tls DIR (a directory made by corral tls init DIR --host NAME)", listen)
				}
				if listen == "" && target.tlsDir != "" {
					return usageErr("daemon: --tls is for --listen HOST:PORT")
				}
				dir, err := stateDir()
				if err != nil {
					return err
				}
				return runDaemon(dir, listen, target.tlsDir, &ops)
			}
			if args[0] != "stop" && args[0] != "status" {
				return usageErr("daemon: unknown argument %q (want stop or status)", args[0])
			}
			if err := opsFlagsUnused(cmd.Flags(), args[0]); err != nil {
				return err
			}
			if listen != "" {
				return usageErr("daemon %s: --listen is for running the daemon (corral daemon --listen HOST:PORT --tls DIR)", args[0])
			}
			host, _, err := remoteHost()
			if err != nil {
				return err
			}
			if host == "" {
				if dir, err := stateDir(); err == nil && !daemonListening(dir) {
					return noDaemon(args[0], asJSON, dir, stdout)
				}
			}
			c, dir, err := connect(false)
			if err != nil {
				return err
			}
			defer c.Close()
			switch args[0] {
			case "stop":
				pid := c.DaemonPid()
				if err := c.Stop(context.Background()); err != nil {
					return callErr(err)
				}
				if host != "" {
					fmt.Fprintf(stdout, "asked the daemon at %s (pid %d) to stop; its sessions keep running\n", host, pid)
					return nil
				}
				// The daemon removes its pid file last.
				pidFile := filepath.Join(dir, "daemon.pid")
				for i := 0; i < 1000; i++ {
					if _, err := os.Stat(pidFile); err != nil {
						fmt.Fprintf(stdout, "stopped the daemon (pid %d); its sessions keep running\n", pid)
						return nil
					}
					time.Sleep(10 * time.Millisecond)
				}
				return &exitError{code: exitInternal, msg: "the daemon did not stop within 10s"}
			default:
				st, err := c.Status(context.Background())
				if err != nil {
					return callErr(err)
				}
				if asJSON {
					return json.NewEncoder(stdout).Encode(map[string]any{"running": true, "pid": st.Pid, "socket": st.Socket,
						"state_dir": st.StateDir, "sessions": st.Sessions, "started": st.Started.UTC(),
						"isolation": st.Isolation})
				}
				fmt.Fprintf(stdout, "pid %d, socket %s, state %s, %d sessions, up since %s, isolation %s\n", st.Pid, st.Socket,
					st.StateDir, st.Sessions, st.Started.Format(time.RFC3339), st.Isolation)
				return nil
			}
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	c.Flags().StringVar(&listen, "listen", "", "also serve remote clients on HOST:PORT over TLS with client certificates (needs --tls DIR)")
	addTargetFlags(c)
	ops.register(c.Flags())
	return c
}

func runDaemon(dir, listen, tlsDir string, ops *daemonOps) error {
	iso, err := isolationOf("", false)
	if err != nil {
		return err
	}
	if err := ops.check(); err != nil {
		return err
	}
	log := ops.logger(os.Stderr)
	healthLn, err := ops.listenHealth()
	if err != nil {
		return err
	}
	// A session that uses up a thread limit the daemon shares with it
	// must not make the daemon die of a thread it could not create.
	daemon.ReserveThreads()
	var holderCmd []string
	if ops.holder != "" {
		holderCmd = []string{ops.holder}
	}
	d, err := server.Open(server.Config{Config: daemon.Config{StateDir: dir, Isolation: iso,
		Log: log, Holder: holderCmd}, Listen: listen, TLSDir: tlsDir})
	if err != nil {
		code := exitInternal
		if errors.Is(err, daemon.ErrRunning) {
			code = 1
		}
		return &exitError{code: code, msg: err.Error()}
	}
	ctx, hurry, stop := signals()
	defer stop()
	d.SetDrain(ops.drain, hurry)
	defer ops.serveHealth(d, healthLn, log)()
	if err := d.Serve(ctx); err != nil {
		return &exitError{code: exitInternal, msg: err.Error()}
	}
	return nil
}

type execFlags struct {
	session   string
	code      string // -c: shell code
	codeSet   bool
	file      string // -f: a file of shell code
	timeout   time.Duration
	grace     time.Duration
	graceSet  bool
	signal    string
	result    string
	maxOutput string
	cwd       string
	oneshot   bool
	bgOutput  bool
	env       []string
	limits    execLimitFlags
}

func execCommand(stdin *os.File, stdout, stderr io.Writer) *cobra.Command {
	var f execFlags
	c := &cobra.Command{
		Use:   "exec -s NAME [flags] {-- COMMAND [ARGS...] | -c CODE | -f FILE}",
		Short: "Run shell code in a named session (created on first use)",
		Long: `Run a command in session NAME, held by the daemon (started on demand).
cd and export persist between calls.

What runs:
  -- 'CODE'            one word is shell code, as with bash -c CODE:
                       corral exec -s s -- 'cd src && make'
  -- CMD ARG...        several words are a command and its arguments, each
                       passed as given (quoted for the shell, never re-split
                       or globbed): corral exec -s s -- rm "my file"
  -c, --code CODE      shell code, explicitly
  -f, --file FILE      the shell code in FILE (up to 1 MiB; no argv limit)

A new session starts with this client's environment and working directory (or
--cwd), with --env NAME=VALUE set over it. With --host (a remote daemon)
nothing of this machine is sent: a new session starts in the daemon's home
(or --cwd, an absolute path there) with the daemon's environment and --env.
--timeout resets the session: the next call gets a fresh shell, started in
the cwd and exported environment of the last completed command (shell
variables, functions and background jobs are gone).

Ctrl-C (or SIGTERM, SIGHUP) stops the command as --timeout does, but with
the signal corral received first (SIGINT reaches the command as SIGINT), then
the grace period (--grace, else the session's), then SIGKILL, and waits until
the tree is gone; a second Ctrl-C kills it at once. The exit status is then
128+signal. --signal chooses what --timeout sends first (SIGTERM by default).

What a command's background jobs write after that command has ended
((sleep 60; echo done) &) is no later command's output: the session keeps
it (the latest 256 KiB of stdout and of stderr), ls --json says how much
(background_bytes), and --background-output prints it and forgets it.

The session's state after the command is recorded before the result is
reported. If it cannot be recorded (a full disk), corral exec says so and
exits 125 even if the command succeeded: the live shell has the state, but a
daemon crash or a reboot may lose it.

A client that reads none of its command's output for 30s (its output pipe
full) has the command stopped by the daemon, so that it does not hold the
session from other clients.

A client that goes away (killed, its connection lost) has its command
stopped, unless --detach-on-disconnect: then the command goes on and the
daemon keeps its output (the newest 4 MiB of it, at most 16 jobs, each an
hour after it ended; not across a daemon restart) under the job id this
client prints first on stderr. corral exec --resume JOB [--offset N]
continues the output from byte N (stdout and stderr counted together;
default: where this machine's client of the job stopped, else 0) and
exits with the command's status.

Resource limits (--memory, --memory-high, --cpus, --pids) apply to the whole
session's tree, the shell and everything it starts: given when the session
is created, they are in force before its shell runs, and every shell it
restarts gets them; given for an existing session, they change its limits
in place (max removes one), and corral says so. They need cgroup v2 with the
controller delegated; where that is missing nothing is created or changed
(exit 125). A command the kernel's OOM killer ended for the session's limit
has outcome oom (exit 137). Each result's cpu_user_ms and cpu_system_ms are
what the session's tree used during the command.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.codeSet = cmd.Flags().Changed("code")
			f.graceSet = cmd.Flags().Changed("grace")
			return execMain(&f, args, stdin, stdout, stderr)
		},
	}
	fl := c.Flags()
	fl.SetInterspersed(false)
	fl.StringVarP(&f.session, "session", "s", "", "session name ([A-Za-z0-9][A-Za-z0-9._-]{0,63})")
	c.RegisterFlagCompletionFunc("session", completeSessions)
	fl.StringVarP(&f.code, "code", "c", "", "run this shell code (as bash -c CODE)")
	fl.StringVarP(&f.file, "file", "f", "", "run the shell code in this file")
	durationFlag(fl, &f.timeout, "timeout", 0, "stop the command (and reset the session) after this long")
	durationFlag(fl, &f.grace, "grace", corral.DefaultGrace, "time between the first signal and SIGKILL when stopping (default: the session's)")
	fl.StringVar(&f.signal, "signal", "TERM", "the first signal a timeout sends the command's tree (a name like INT, HUP, or a number)")
	fl.StringVar(&f.result, "result", "", "write the result as one JSON object to this file ('-': stdout, after the command's output)")
	fl.StringVar(&f.maxOutput, "max-output", "", "stop the command once its output passes this size (e.g. 10MiB)")
	fl.StringVar(&f.cwd, "cwd", "", "working directory: a new session's first, or cd to it before the command")
	fl.BoolVar(&f.oneshot, "oneshot", false, "run in a fresh contained shell instead of the session")
	fl.BoolVar(&f.bgOutput, "background-output", false, "run nothing: print (and forget) what the session's background jobs wrote after their command ended")
	fl.StringVar(&f.limits.memory, "memory", "", "memory limit of the session's tree (cgroup memory.max, e.g. 512MiB; max: none): set when the session is created, changed in place on an existing one")
	fl.StringVar(&f.limits.memoryHigh, "memory-high", "", "memory the session's tree is throttled and reclaimed above (cgroup memory.high; max: none)")
	fl.StringVar(&f.limits.cpus, "cpus", "", "CPU limit of the session's tree in CPUs, e.g. 0.5 or 2 (cgroup cpu.max; max: none)")
	fl.StringVar(&f.limits.pids, "pids", "", "most processes the session's tree may have at once (cgroup pids.max; max: none)")
	fl.StringArrayVar(&f.env, "env", nil, "set NAME=VALUE in a new session's (or a oneshot's) environment; repeatable")
	addTargetFlags(c)
	addDetachFlags(c)
	return c
}

func execMain(f *execFlags, args []string, stdin *os.File, stdout, stderr io.Writer) error {
	if detachFlags.resume != "" {
		return resumeMain(f, args, stdout, stderr)
	}
	if err := checkDetachFlags(); err != nil {
		return err
	}
	if f.oneshot && f.session != "" {
		return usageErr("exec: --oneshot runs in a fresh shell of its own and takes no -s NAME")
	}
	if !f.oneshot {
		if f.session == "" {
			return usageErr("exec: -s NAME is required (or --oneshot)")
		}
		if err := store.CheckName(f.session); err != nil {
			return usageErr("%v", err)
		}
	}
	if f.timeout < 0 {
		return usageErr("--timeout must not be negative")
	}
	if f.grace < 0 {
		return usageErr("--grace must not be negative")
	}
	var stopSig syscall.Signal
	if f.signal != "TERM" {
		sig, err := parseSignal(f.signal)
		if err != nil {
			return usageErr("%v", err)
		}
		stopSig = sig
	}
	limits, err := f.limits.limits()
	if err != nil {
		return err
	}
	var code string
	if f.bgOutput && (f.oneshot || f.codeSet || f.file != "" || len(args) > 0) {
		return usageErr("exec: --background-output runs nothing: give it -s NAME and no command")
	}
	if f.bgOutput || f.limits.given() && !f.codeSet && f.file == "" && len(args) == 0 {
		// Only the limits: change them (or create the session with
		// them) and run nothing.
	} else if code, err = execCode(f, args); err != nil {
		return err
	}
	if err := envFlags(f.env); err != nil {
		return err
	}
	host, _, err := remoteHost()
	if err != nil {
		return err
	}
	// The request, built once: the daemon checks it.
	opts := client.ExecOptions{Timeout: f.timeout, Oneshot: f.oneshot, BackgroundOutput: f.bgOutput,
		Env: append(os.Environ(), f.env...), StopSignal: stopSig, Limits: limits}
	opts.Stdout, opts.Stderr = merged(stdout, stderr)
	if host != "" {
		// Nothing of this machine's: the daemon's environment, and --env.
		opts.Env = f.env
	}
	if f.maxOutput != "" {
		n, err := parseSize(f.maxOutput)
		if err != nil || n <= 0 {
			return usageErr("--max-output: want a positive size like 10MiB, got %q", f.maxOutput)
		}
		opts.MaxOutput = n
	}
	switch {
	case f.cwd != "" && host != "":
		if !filepath.IsAbs(f.cwd) {
			return usageErr("--cwd %s: with --host, give an absolute path on the daemon's machine", f.cwd)
		}
		opts.Cwd = f.cwd
	case f.cwd != "":
		abs, err := filepath.Abs(f.cwd)
		if err != nil {
			return usageErr("--cwd: %v", err)
		}
		opts.Cwd = abs
	case host == "":
		opts.Dir, _ = os.Getwd()
	}
	if f.graceSet {
		opts.Grace = f.grace
		if f.grace == 0 {
			opts.Grace = -1 // --grace 0: kill at once
		}
	}
	if stdin != nil && !devNull(stdin) {
		// /dev/null gives end of file at once, as no stdin does, and
		// forwarding it costs the call a stdin FIFO (0.4 ms here).
		opts.Stdin = stdin
	}
	resultFile, err := openResult(f.result, stdout)
	if err != nil {
		return err
	}
	if resultFile != nil {
		defer resultFile.Close()
	}
	dc, _, err := connect(true)
	if err != nil {
		return err
	}
	defer dc.Close()
	if os.Getenv(isolationEnv) != "" && host == "" {
		// Asked for an isolation: make sure the daemon gives it. (This
		// machine's environment says nothing of a remote daemon's.)
		st, err := dc.Status(context.Background())
		if err != nil {
			return callErr(err)
		}
		if err := checkDaemonIsolation(st.Isolation, int32(st.Pid)); err != nil {
			return err
		}
	}
	// As corral run: the first SIGINT, SIGTERM or SIGHUP stops the command
	// (that signal first, the grace, SIGKILL) and this client waits for
	// its tree to be gone and prints the result; a second SIGINT kills it
	// at once.
	interrupt := make(chan struct{})
	got, kill, stopSignals := catchSignals(func(error) { close(interrupt) })
	defer stopSignals()
	opts.Interrupt, opts.Kill, opts.InterruptSignal = interrupt, kill, got
	job := detaching(&opts, stderr)
	res, err := dc.Exec(context.Background(), f.session, code, opts)
	if job != nil && res != nil {
		job.done()
	} else if job != nil && got() == 0 {
		return job.lost(err)
	}
	if res != nil {
		if res.LimitsChanged {
			sayLimitsChanged(stderr, f.session, res.Limits)
		}
		writeResult(f.result, resultFile, stdout, stderr, &res.Result)
		exit := exitForRun(&res.Result, nil, got(), f.limits.given())
		if !errors.Is(err, client.ErrStateNotSaved) {
			return exit
		}
		// The command ran; what it changed may not survive the daemon.
		msg := "the command exited 0"
		var ee *exitError
		if errors.As(exit, &ee) {
			msg = joinMsg(fmt.Sprintf("the command ended with %d", ee.code), ee.msg)
		}
		var sns *client.StateNotSavedError
		errors.As(err, &sns)
		return &exitError{code: exitInternal, msg: fmt.Sprintf("%s, but %v (a daemon crash or a reboot may lose it): %s",
			msg, client.ErrStateNotSaved, sns.Reason)}
	}
	if sig := got(); sig != 0 {
		// The call ended without a result: the daemon went away while
		// it stopped the command, which may still run.
		return &exitError{code: 128 + int(sig), msg: fmt.Sprintf("stopped on %v; %v", sig, callErr(err))}
	}
	return callErr(err)
}

func lsCommand(stdout io.Writer) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the named sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := connect(true)
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := c.List(context.Background())
			if err != nil {
				return callErr(err)
			}
			if asJSON {
				out := []map[string]any{}
				for _, s := range list {
					e := map[string]any{"name": s.Name, "state": s.State, "shell": s.Shell, "cwd": s.Cwd,
						"created": s.Created.UTC(), "last_used": s.LastUsed.UTC(),
						"shell_pid": s.ShellPid, "busy": s.Busy, "background_bytes": s.BackgroundBytes}
					if s.Reason != "" {
						e["reason"] = s.Reason
					}
					if !utf8.ValidString(s.Cwd) {
						// JSON text would have it replaced: the bytes too.
						e["cwd_bytes"] = []byte(s.Cwd)
					}
					lsLimits(e, s.Limits, s.MemoryBytes, s.Pids, s.Accounting)
					lsKind(e, s)
					out = append(out, e)
				}
				return json.NewEncoder(stdout).Encode(out)
			}
			w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tKIND\tSTATE\tSHELL\tCWD\tCREATED\tLAST USED\tPID")
			for _, s := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Name, s.Kind, s.State, lsShell(s), s.Cwd,
					s.Created.Format(time.DateTime), s.LastUsed.Format(time.DateTime), s.ShellPid)
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addTargetFlags(c)
	return c
}

func killCommand(stdout io.Writer) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:               "kill NAME... | --all",
		Short:             "End sessions (their whole trees) and delete their records",
		ValidArgsFunction: completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return usageErr("kill: name sessions, or --all")
			}
			for _, n := range args {
				if err := store.CheckName(n); err != nil {
					return usageErr("%v", err)
				}
			}
			host, _, err := remoteHost()
			if err != nil {
				return err
			}
			// A local daemon that is not running: sessions outlive it, so
			// look in the records, and start one only if there is
			// something to kill, never just to say that there is not. (A
			// remote daemon answers for its own records.)
			if host == "" {
				if missing, ok := noDaemonUnrecorded(args, all); ok && len(missing) == len(args) {
					if all {
						return nil
					}
					return &exitError{code: 1, msg: "no such session: " + strings.Join(missing, ", ")}
				}
			}
			c, _, err := connect(true)
			if err != nil {
				return err
			}
			defer c.Close()
			killed, err := c.Kill(context.Background(), all, args...)
			for _, n := range killed {
				fmt.Fprintln(stdout, "killed", n)
			}
			if err != nil {
				return callErr(err)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&all, "all", false, "end every session")
	addTargetFlags(c)
	return c
}

// noDaemonUnrecorded reports, when no local daemon is running, which of
// names have no record in the state directory (ok false if a daemon runs
// or the records cannot be read).
func noDaemonUnrecorded(names []string, all bool) (missing []string, ok bool) {
	dir, err := stateDir()
	if err != nil || daemonListening(dir) {
		return nil, false
	}
	return unrecorded(dir, names, all)
}

// devNull reports whether f is /dev/null.
func devNull(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(fi, null)
}
