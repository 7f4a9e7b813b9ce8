package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/term"
	"github.com/corral-dev/corral/terminal"
)

// interruptContext is a context cancelled when this process gets SIGINT,
// SIGTERM or SIGHUP: a command that waits on the daemon then ends
// cleanly (a terminal put back, a wait cut off) instead of dying mid-way.
func interruptContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

// parseDetachKey reads --detach-keys: one key, as ctrl-X, C-X or ^X (a
// letter or one of @[\]^_), or none.
func parseDetachKey(s string) (key byte, none bool, err error) {
	if s == "none" {
		return 0, true, nil
	}
	rest := ""
	for _, p := range []string{"ctrl-", "Ctrl-", "C-", "c-", "^"} {
		if r, ok := strings.CutPrefix(s, p); ok {
			rest = r
			break
		}
	}
	if len(rest) == 1 {
		if b, err := terminal.Keys("C-" + rest); err == nil && len(b) == 1 {
			return b[0], false, nil
		}
	}
	return 0, false, fmt.Errorf("--detach-keys %q: want one control key, like ctrl-\\ (the default), ctrl-a or C-q, or none (then only the program's exit ends attach)", s)
}

func attachCommand(stdin *os.File, stdout, stderr io.Writer) *cobra.Command {
	var detachKeys, size, cwd, policy string
	var env []string
	var readOnly bool
	c := &cobra.Command{
		Use:   "attach NAME [--detach-keys KEYS|none] [--read-only] [-- CMD ARGS...]",
		Short: "Attach this terminal to a terminal session, creating it (running CMD, default your shell) if it does not exist",
		Long: `Attach joins this terminal to a terminal session: its current screen is drawn
at once, then what the program writes, and what you type goes to it. The
session is created if it does not exist (running CMD, or your shell), and
started again in its saved directory if it is down (after a reboot). Press
the detach key (ctrl-\ unless --detach-keys says otherwise) to leave it
running; every mode the program set on this terminal is then undone. When
the program exits, attach exits with its status.`,
		Example: `  corral attach work                       # your shell, in a session that outlives this terminal
  corral attach edit -- vim notes.txt
  corral attach edit --detach-keys ctrl-q  # vim wants ctrl-\
  corral attach build --read-only          # watch, without typing into it`,
		ValidArgsFunction: completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			names, command := splitDash(cmd, args)
			if len(names) != 1 {
				return usageErr("attach: give one session NAME (and the command to create it with after --)")
			}
			name := names[0]
			if err := termName(name); err != nil {
				return err
			}
			key, noKey, err := parseDetachKey(detachKeys)
			if err != nil {
				return usageErr("%v", err)
			}
			if err := envFlags(env); err != nil {
				return err
			}
			if err := checkPolicy(policy); err != nil {
				return err
			}
			o := client.TermOpenOptions{Command: command, Cwd: cwd, Env: env, SizePolicy: policy, Existing: true}
			if size != "" {
				if o.Cols, o.Rows, err = term.ParseSize(size); err != nil {
					return usageErr("--size: %v", err)
				}
			}
			if !term.IsTerminal(stdin) {
				return usageErr("attach: standard input is not a terminal (drive the session with corral term send, screen and wait)")
			}
			out, ok := stdout.(*os.File)
			if !ok || !term.IsTerminal(out) {
				out = stdin
			}
			cl, err := termClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := interruptContext()
			defer stop()
			if readOnly && len(command) > 0 {
				return usageErr("attach --read-only: a read-only client creates nothing; drop the command or --read-only")
			}
			if !readOnly {
				_, err := cl.TermOpen(ctx, name, o)
				switch {
				case errors.Is(err, client.ErrPermission) && len(command) == 0:
					// A read-only identity (remote): it may watch.
					fmt.Fprintf(stderr, "corral: %v; attaching read-only\n", err)
					readOnly = true
				case err != nil:
					return callErr(err)
				}
			}
			var att *client.TermAttachment
			open := func(ctx context.Context, cols, rows int) (terminal.Stream, error) {
				a, err := cl.TermAttach(ctx, name, client.TermAttachOptions{Cols: cols, Rows: rows, ReadOnly: readOnly})
				if err != nil {
					return nil, err
				}
				att = a
				return a, nil
			}
			exited, code, err := terminal.AttachStream(ctx, open, stdin, out, terminal.TerminalOptions{DetachKey: key, NoDetachKey: noKey, ReadOnly: readOnly})
			switch {
			case err != nil && ctx.Err() != nil:
				fmt.Fprintf(stderr, "[detached from %s: %v]\r\n", name, context.Cause(ctx))
				return &exitError{code: 130}
			case err != nil:
				if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrBadRequest) {
					return callErr(err)
				}
				return &exitError{code: exitInternal, msg: "attach: " + err.Error()}
			case exited:
				if code < 0 {
					code = 128 + att.Status().Signal
				}
				if code != 0 {
					return &exitError{code: code}
				}
				return nil
			}
			fmt.Fprintf(stderr, "[detached from %s]\n", name)
			return nil
		},
	}
	c.Flags().StringVar(&detachKeys, "detach-keys", "ctrl-\\", "the key that detaches (ctrl-X, C-X or ^X), or none")
	c.Flags().BoolVar(&readOnly, "read-only", false, "watch only: nothing typed is sent (the detach key still detaches); creates nothing")
	c.Flags().StringVar(&size, "size", "", "the window's size when this creates the session, COLSxROWS (attached, it follows the size policy)")
	c.Flags().StringVar(&cwd, "cwd", "", "the program's working directory when this creates the session (default: this one)")
	c.Flags().StringArrayVar(&env, "env", nil, "add NAME=VALUE to the program's environment when this creates the session (repeatable)")
	c.Flags().StringVar(&policy, "size-policy", "", "when this creates the session: typed (default), smallest, largest or fixed")
	addTargetFlags(c)
	return c
}
