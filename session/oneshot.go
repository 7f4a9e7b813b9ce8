package session

import (
	"context"

	"github.com/corral-dev/corral"
)

// RunOnce runs code in a fresh contained shell made from cfg (shell, dir,
// env, isolation, grace, drain, OnStart) that exists for this one command:
// nothing persists, and nothing is lost when it is cancelled. It is corral.Cmd.Run
// of "SHELL -c code".
func RunOnce(ctx context.Context, cfg Config, code string, opts Options) (*corral.Result, error) {
	if cfg.Shell == "" {
		cfg.Shell = defaultShell()
	}
	c := corral.Command(cfg.Shell, "-c", code)
	c.Env, c.Dir = cfg.Env, cfg.Dir
	c.Isolation, c.Grace, c.Drain = cfg.Isolation, cfg.Grace, cfg.Drain
	c.OnStart = cfg.OnStart
	c.Stdin, c.Stdout, c.Stderr = opts.Stdin, opts.Stdout, opts.Stderr
	c.Timeout, c.MaxOutput = opts.Timeout, opts.MaxOutput
	c.Escalate = opts.Escalate
	if opts.Grace != 0 {
		c.Grace = opts.Grace
	}
	c.StopSignal = opts.StopSignal
	return c.Run(ctx)
}
