package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/term"
	"github.com/corral-dev/corral/terminal"
)

const termLong = `Terminal sessions run programs that do not end (editors, REPLs, top, an
installer that asks questions, another agent) on a pseudo-terminal kept by
the daemon, each held by a small process of its own that keeps the screen
and a scrollback bounded in bytes. They survive the daemon (a crash costs
neither the program nor its screen) and their record survives a reboot
(the session is then down, and term open or attach starts its program
again in its saved directory).

The term verbs drive a session without a terminal, as an agent or a script
does: open it, send text or keys, read the screen, wait for text, quiet or
the program's exit. corral attach joins one from a terminal.`

const termExamples = `  corral term open repl -- python3              # a detached session running python3
  corral term wait repl --text '^>>>' --timeout 10s
  corral term send repl 'print(6*7)' ; corral term send repl --keys Enter
  corral term wait repl --idle 300ms ; corral term screen repl
  corral term send repl --keys C-d ; corral term wait repl --exit    # its exit status
  corral attach repl                              # a person joins; ctrl-\ detaches
  corral kill repl`

func termCommand(stdin *os.File, stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:     "term",
		Short:   "Drive terminal sessions without a terminal: open, send, screen, wait, resize",
		Long:    termLong,
		Example: termExamples,
	}
	c.AddCommand(termOpenCommand(), termSendCommand(stdin), termScreenCommand(stdout), termWaitCommand(stdout), termResizeCommand())
	return c
}

// termName checks the session name argument before anything is sent.
func termName(name string) error {
	if err := store.CheckName(name); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

// splitDash splits args at "--": the name before it, the command after.
func splitDash(cmd *cobra.Command, args []string) (before, after []string) {
	if i := cmd.ArgsLenAtDash(); i >= 0 {
		return args[:i], args[i:]
	}
	return args, nil
}

func termClient() (*client.Client, error) {
	c, _, err := connect(true)
	return c, err
}

func termOpenCommand() *cobra.Command {
	var size, cwd, policy string
	var env []string
	c := &cobra.Command{
		Use:   "open NAME [--size COLSxROWS] [--cwd DIR] [--env K=V]... [--size-policy P] [-- CMD ARGS...]",
		Short: "Start a detached terminal session running CMD (default: your shell)",
		Example: `  corral term open build -- make -j8
  corral term open edit --size 120x40 --cwd ~/src -- vim main.go
  corral term open agent --env API_KEY=... -- ./agent --interactive`,
		RunE: func(cmd *cobra.Command, args []string) error {
			names, command := splitDash(cmd, args)
			if len(names) != 1 {
				return usageErr("term open: give one session NAME (and the command after --)")
			}
			if err := termName(names[0]); err != nil {
				return err
			}
			o := client.TermOpenOptions{Command: command, Cwd: cwd, Env: env, SizePolicy: policy}
			if size != "" {
				cols, rows, err := term.ParseSize(size)
				if err != nil {
					return usageErr("--size: %v", err)
				}
				o.Cols, o.Rows = cols, rows
			}
			if err := envFlags(env); err != nil {
				return err
			}
			if err := checkPolicy(policy); err != nil {
				return err
			}
			cl, err := termClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			if _, err := cl.TermOpen(context.Background(), names[0], o); err != nil {
				return callErr(err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&size, "size", "", "the window's size, COLSxROWS (default 80x24)")
	c.Flags().StringVar(&cwd, "cwd", "", "the program's working directory (default: this one)")
	c.Flags().StringArrayVar(&env, "env", nil, "add NAME=VALUE to the program's environment (repeatable)")
	c.Flags().StringVar(&policy, "size-policy", "", "whose size the window takes as clients attach: typed (the most recent client that typed; default), smallest, largest, fixed")
	c.ValidArgsFunction = completeSessions
	addTargetFlags(c)
	return c
}

func checkPolicy(p string) error {
	switch p {
	case "", "typed", "smallest", "largest", "fixed":
		return nil
	}
	return usageErr("--size-policy %q: want typed, smallest, largest or fixed", p)
}

// maxSendStdin bounds the text term send reads from standard input.
const maxSendStdin = 1 << 20

func termSendCommand(stdin *os.File) *cobra.Command {
	var keys bool
	c := &cobra.Command{
		Use:   "send NAME [--keys] [TEXT...]",
		Short: "Type text (or, with --keys, named keys) into a terminal session",
		Long: `Send types TEXT into the session's program, the words joined by spaces, with
no Enter after it; with no TEXT it types what standard input holds. With
--keys each word is a key in tmux's notation: Enter, Tab, BTab, Space,
Escape, BSpace, Up, Down, Left, Right, Home, End, PageUp, PageDown,
Insert, Delete, F1 to F12, a single character, and these with C- (control),
M- (meta) or S- (shift) before them: C-c, M-x, C-Up.`,
		Example: `  corral term send repl 'print("hi")'
  corral term send repl --keys Enter
  corral term send edit --keys Escape : w q Enter
  corral term send build --keys C-c`,
		ValidArgsFunction: completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("term send: give the session NAME, then the text or keys")
			}
			name, words := args[0], args[1:]
			if err := termName(name); err != nil {
				return err
			}
			var data []byte
			var keyNames []string
			switch {
			case keys && len(words) == 0:
				return usageErr("term send --keys: name the keys to send (Enter, C-c, Up, ...)")
			case keys:
				// Checked here for a usage error; the daemon sends them
				// as the program's cursor-key mode asks.
				if _, err := terminal.Keys(words...); err != nil {
					return usageErr("%v", err)
				}
				keyNames = words
			case len(words) > 0:
				data = []byte(strings.Join(words, " "))
			default:
				if term.IsTerminal(stdin) {
					return usageErr("term send: give the text to send (or pipe it in on standard input)")
				}
				b, err := io.ReadAll(io.LimitReader(stdin, maxSendStdin+1))
				if err != nil {
					return &exitError{code: exitInternal, msg: fmt.Sprintf("term send: read standard input: %v", err)}
				}
				if len(b) > maxSendStdin {
					return usageErr("term send: standard input holds more than %d bytes; send it in parts", maxSendStdin)
				}
				data = b
			}
			cl, err := termClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := cl.TermSendKeys(context.Background(), name, data, keyNames); err != nil {
				return callErr(err)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&keys, "keys", false, "each word is a key name (tmux's notation: Enter, C-c, Escape, Up, F1, M-x, ...)")
	addTargetFlags(c)
	return c
}

func termScreenCommand(stdout io.Writer) *cobra.Command {
	var ansi, asJSON bool
	var scrollback int
	c := &cobra.Command{
		Use:   "screen NAME [--ansi] [--json] [--scrollback N]",
		Short: "Print a terminal session's current screen",
		Example: `  corral term screen repl
  corral term screen repl --scrollback 200      # the newest 200 scrollback rows first
  corral term screen repl --json                # with size, cursor, title, alternate screen, exit status`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := termName(args[0]); err != nil {
				return err
			}
			if scrollback < -1 {
				return usageErr("--scrollback %d: want a number of rows, or -1 for all", scrollback)
			}
			cl, err := termClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			s, err := cl.TermScreen(context.Background(), args[0], client.TermScreenOptions{ANSI: ansi, Scrollback: scrollback})
			if err != nil {
				return callErr(err)
			}
			if asJSON {
				out := map[string]any{"cols": s.Cols, "rows": s.Rows, "text": s.Text, "cursor_x": s.CursorX, "cursor_y": s.CursorY,
					"cursor_visible": s.CursorVisible, "title": s.Title, "alt_screen": s.AltScreen,
					"exited": s.Status.Exited, "holder_pid": s.Status.HolderPid}
				if s.Scrollback != nil {
					out["scrollback"] = s.Scrollback
				}
				if s.Status.Exited {
					out["exit_code"] = s.Status.ExitCode
					if s.Status.Signal != 0 {
						out["signal"] = s.Status.Signal
					}
				} else {
					out["pid"] = s.Status.Pid
				}
				return json.NewEncoder(stdout).Encode(out)
			}
			var b strings.Builder
			for _, row := range s.Scrollback {
				b.WriteString(row)
				b.WriteByte('\n')
			}
			b.WriteString(s.Text)
			_, err = io.WriteString(stdout, b.String())
			return err
		},
	}
	c.Flags().BoolVar(&ansi, "ansi", false, "with the text's attributes (colours, bold...) as ANSI escape sequences")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: text, size, cursor, title, alternate screen, whether the program exited and its status")
	c.Flags().IntVar(&scrollback, "scrollback", 0, "also print the newest N scrollback rows, before the screen (-1: all)")
	addTargetFlags(c)
	return c
}

func termWaitCommand(stdout io.Writer) *cobra.Command {
	var text string
	var idle, timeout time.Duration
	var exit bool
	c := &cobra.Command{
		Use:   "wait NAME [--text REGEX] [--idle DUR] [--exit] [--timeout DUR]",
		Short: "Wait until the screen matches, the output goes quiet, or the program exits",
		Long: `Wait returns as soon as the first of what it is given happens: the screen
matches REGEX (Go syntax; ^ and $ match at each row, whose trailing blanks
are trimmed: a prompt "$ " is matched by '^\$ ?$'), no output came for
DUR, or (--exit) the program exited; a match is printed. Exit status: 0 when it matched or went
quiet, the program's own status with --exit when it exited, 124 when
--timeout passed first.`,
		Example: `  corral term wait repl --text '^>>>' --timeout 10s
  corral term wait build --idle 2s --timeout 5m
  corral term wait build --exit; echo "make exited $?"`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := termName(args[0]); err != nil {
				return err
			}
			if text == "" && idle <= 0 && !exit {
				return usageErr("term wait: give what to wait for: --text REGEX, --idle DUR or --exit")
			}
			if text != "" {
				if _, err := regexp.Compile(text); err != nil {
					return usageErr("--text: %v", err)
				}
			}
			if idle < 0 || timeout < 0 {
				return usageErr("term wait: --idle and --timeout must not be negative")
			}
			cl, err := termClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := interruptContext()
			defer stop()
			r, err := cl.TermWait(ctx, args[0], client.TermWaitOptions{Text: text, Idle: idle, Exit: exit, Timeout: timeout})
			if err != nil {
				if ctx.Err() != nil {
					return &exitError{code: 130, msg: "interrupted"}
				}
				return callErr(err)
			}
			switch r.Reason {
			case "timeout":
				return &exitError{code: exitTimeout, msg: fmt.Sprintf("term wait %s: timed out after %v", args[0], timeout)}
			case "exit":
				code := r.Status.ExitCode
				if code < 0 {
					code = 128 + r.Status.Signal
				}
				if code != 0 {
					return &exitError{code: code}
				}
			case "text":
				fmt.Fprintln(stdout, r.Match)
			}
			return nil
		},
	}
	c.Flags().StringVar(&text, "text", "", "a regular expression the screen must match")
	c.Flags().DurationVar(&idle, "idle", 0, "return once no output came for this long (300ms, 2s)")
	c.Flags().BoolVar(&exit, "exit", false, "return once the program exits, with its status")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long, with status 124 (default: no bound)")
	addTargetFlags(c)
	return c
}

func termResizeCommand() *cobra.Command {
	c := &cobra.Command{
		Use:               "resize NAME COLSxROWS",
		Short:             "Set a terminal session's window size (the program gets SIGWINCH)",
		Example:           `  corral term resize edit 160x50`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := termName(args[0]); err != nil {
				return err
			}
			cols, rows, err := term.ParseSize(args[1])
			if err != nil {
				return usageErr("term resize: %v", err)
			}
			cl, err := termClient()
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := cl.TermResize(context.Background(), args[0], cols, rows); err != nil {
				return callErr(err)
			}
			return nil
		},
	}
	addTargetFlags(c)
	return c
}

// lsKind adds a session's kind to its ls --json entry, and for a
// terminal session its command, size and holder.
func lsKind(e map[string]any, s client.Session) {
	e["kind"] = s.Kind
	if t := s.Term; t != nil {
		e["command"] = t.Command
		e["size"] = fmt.Sprintf("%dx%d", t.Cols, t.Rows)
		if t.SizePolicy != "" {
			e["size_policy"] = t.SizePolicy
		}
		if t.HolderPid != 0 {
			e["holder_pid"] = t.HolderPid
		}
		if t.Exited {
			e["exit_code"] = t.ExitCode
		}
	}
}

// lsShell is what ls shows in its SHELL column: the shell, or a terminal
// session's command line.
func lsShell(s client.Session) string {
	if s.Term != nil && len(s.Term.Command) > 0 {
		return strings.Join(s.Term.Command, " ")
	}
	return s.Shell
}
