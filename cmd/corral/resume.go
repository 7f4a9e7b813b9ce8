package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/statedir"
)

// detachFlags are corral exec's flags for detached jobs: a command that
// goes on when its client goes away, and continuing one.
var detachFlags struct {
	onDisconnect bool
	resume       string
	offset       int64
}

// addDetachFlags gives exec the flags of detached jobs.
func addDetachFlags(c *cobra.Command) {
	fl := c.Flags()
	fl.BoolVar(&detachFlags.onDisconnect, "detach-on-disconnect", false,
		"if this client goes away (killed, connection lost), the command goes on and the daemon keeps its output under a job id (printed first, on stderr): corral exec --resume JOB continues it")
	fl.StringVar(&detachFlags.resume, "resume", "", "continue the output of detached job JOB and end with its result (no command, -s or --oneshot)")
	fl.Int64Var(&detachFlags.offset, "offset", -1, "with --resume: the byte of the job's output (stdout and stderr together) to continue from (default: where this machine's client of the job stopped, else 0)")
}

// jobName is what a job id may be (the daemon makes j + 16 hex digits):
// it names a file of the state directory.
var jobName = regexp.MustCompile(`^[A-Za-z0-9]{1,64}$`)

// jobProgress counts the output bytes a client of a detached job has
// written, and keeps the count in <state>/jobs/JOB, so that a later
// --resume on this machine continues from there.
type jobProgress struct {
	stderr io.Writer
	dir    string // <state>/jobs, "" when it cannot be kept

	// mu guards the fields that follow (stdout and stderr are written in
	// turn, but OnJob comes from the client's reader too).
	mu  sync.Mutex
	job string
	off int64
	f   *os.File
}

// progressDir is <state>/jobs, made if need be; "" (after a warning on
// stderr) if it cannot be.
func progressDir(stderr io.Writer) string {
	dir, err := statedir.Path()
	if err == nil {
		dir, err = statedir.Ensure(dir)
	}
	if err == nil {
		dir = filepath.Join(dir, "jobs")
		if err = os.Mkdir(dir, 0o700); errors.Is(err, os.ErrExist) {
			err = statedir.Verify(dir)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "corral: cannot keep this job's progress (%v): a --resume will need --offset\n", err)
		return ""
	}
	return dir
}

// detaching sets o up for --detach-on-disconnect: the job's id is printed
// on stderr as soon as the daemon gives it, and every output byte is
// counted. It returns nil without the flag.
func detaching(o *client.ExecOptions, stderr io.Writer) *jobProgress {
	if !detachFlags.onDisconnect {
		return nil
	}
	p := &jobProgress{stderr: stderr, dir: progressDir(stderr)}
	o.DetachOnDisconnect = true
	o.OnJob = func(job string) {
		fmt.Fprintf(stderr, "corral: job %s: if this client goes away the command goes on; continue it with: corral exec%s --resume %s\n",
			job, targetArgs(), job)
		p.start(job, 0)
	}
	p.wrap(o)
	return p
}

// targetArgs are the --host and --tls of this call, to repeat in a hint.
func targetArgs() string {
	host, dir, err := remoteHost()
	if err != nil || host == "" {
		return ""
	}
	return fmt.Sprintf(" --host %s --tls %s", host, dir)
}

// start begins counting job's output at off.
func (p *jobProgress) start(job string, off int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.job, p.off = job, off
	if p.dir == "" || !jobName.MatchString(job) {
		return
	}
	f, err := os.OpenFile(filepath.Join(p.dir, job), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		fmt.Fprintf(p.stderr, "corral: cannot keep this job's progress (%v): a --resume will need --offset\n", err)
		return
	}
	p.f = f
	p.saveLocked()
}

func (p *jobProgress) saveLocked() {
	if p.f != nil {
		p.f.WriteAt([]byte(fmt.Sprintf("%020d\n", p.off)), 0)
	}
}

// wrap counts what o's writers are given (one writer for both streams
// when they are one, so the daemon still merges them).
func (p *jobProgress) wrap(o *client.ExecOptions) {
	same := o.Stdout == o.Stderr
	if o.Stdout != nil {
		o.Stdout = &countedWriter{w: o.Stdout, p: p}
	}
	if same {
		o.Stderr = o.Stdout
	} else if o.Stderr != nil {
		o.Stderr = &countedWriter{w: o.Stderr, p: p}
	}
}

// done removes the progress file of a job whose result arrived.
func (p *jobProgress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f != nil {
		p.f.Close()
		os.Remove(filepath.Join(p.dir, p.job))
		p.f = nil
	}
}

// lost is the error of a call that ended without a result: if the daemon
// gave a job, the command goes on, and the message says how to continue.
func (p *jobProgress) lost(err error) error {
	p.mu.Lock()
	job, off := p.job, p.off
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
	p.mu.Unlock()
	if job == "" || !errors.Is(err, client.ErrLost) {
		return callErr(err)
	}
	return &exitError{code: exitInternal, msg: fmt.Sprintf("%v; the command goes on as job %s (%d bytes of output received): continue it with: corral exec%s --resume %s",
		err, job, off, targetArgs(), job)}
}

// countedWriter counts the bytes written through it in its jobProgress.
type countedWriter struct {
	w io.Writer
	p *jobProgress
}

func (c *countedWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.mu.Lock()
	// Every byte the daemon sent counts, written or not: the offset is
	// the daemon's.
	c.p.off += int64(len(b))
	c.p.saveLocked()
	c.p.mu.Unlock()
	return n, err
}

// savedOffset is the offset this machine's client of job recorded, if
// any.
func savedOffset(job string) (int64, bool) {
	dir, err := statedir.Path()
	if err != nil {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(dir, "jobs", job))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil && n >= 0
}

// checkDetachFlags refuses --offset without --resume.
func checkDetachFlags() error {
	if detachFlags.resume == "" && detachFlags.offset != -1 {
		return usageErr("--offset is for --resume JOB (where to continue a detached job's output)")
	}
	return nil
}

// resumeMain runs corral exec --resume JOB: the job's output from the
// offset, then its result, as corral exec reports a command's.
func resumeMain(f *execFlags, args []string, stdout, stderr io.Writer) error {
	job := detachFlags.resume
	switch {
	case detachFlags.offset < -1:
		return usageErr("--offset %d: want a byte offset, 0 or more", detachFlags.offset)
	case !jobName.MatchString(job):
		return usageErr("--resume %q: a job id is what corral exec --detach-on-disconnect printed (letters and digits)", job)
	case len(args) > 0 || f.codeSet || f.file != "" || f.session != "" || f.oneshot || detachFlags.onDisconnect:
		return usageErr("exec --resume JOB continues a job: it takes no command, -c, -f, -s, --oneshot or --detach-on-disconnect")
	}
	off := detachFlags.offset
	if off < 0 {
		off = 0
		if saved, ok := savedOffset(job); ok {
			off = saved
		}
	}
	resultFile, err := openResult(f.result, stdout)
	if err != nil {
		return err
	}
	if resultFile != nil {
		defer resultFile.Close()
	}
	dc, _, err := connect(false) // a daemon started now would not know the job
	if err != nil {
		return err
	}
	defer dc.Close()
	var opts client.ExecOptions
	opts.Stdout, opts.Stderr = merged(stdout, stderr)
	p := &jobProgress{stderr: stderr, dir: progressDir(stderr)}
	p.start(job, off)
	p.wrap(&opts)
	interrupt := make(chan struct{})
	got, kill, stopSignals := catchSignals(func(error) { close(interrupt) })
	defer stopSignals()
	opts.Interrupt, opts.Kill, opts.InterruptSignal = interrupt, kill, got
	res, err := dc.Resume(context.Background(), job, off, opts)
	if res == nil {
		return p.lost(err)
	}
	p.done()
	writeResult(f.result, resultFile, stdout, stderr, &res.Result)
	return exitForRun(&res.Result, nil, got(), false)
}
