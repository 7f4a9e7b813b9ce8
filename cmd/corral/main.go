// Command corral runs commands as contained process trees.
//
//	corral run [flags] -- COMMAND [ARGS...]
//	corral reap [--dry-run] [--json]
//
// See the README for the exit codes and every flag.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/internal/contain"
)

// Exit codes of corral's own (the command's own status passes through).
const (
	exitUsage       = 2   // bad flag or argument: nothing ran
	exitOutputLimit = 122 // output passed --max-output; the tree was killed
	exitStdioHeld   = 123 // a kept descendant held stdio past --drain
	exitTimeout     = 124 // --timeout passed; the tree was stopped
	exitInternal    = 125 // corral itself failed (record, isolation, kill)
	exitNotExec     = 126 // the command cannot be executed
	exitNotFound    = 127 // the command was not found
)

// exitError carries an exit code out of a subcommand; msg, if set, is
// printed as one line on stderr.
type exitError struct {
	code int
	msg  string
	// usage marks corral's own usage errors: only they get the hint
	// naming --help (a command's own exit status 2 does not).
	usage bool
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, a ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, a...), usage: true}
}

func main() {
	// This process starts no children but corral's trees, so the child
	// subreaper of the pgroup backend may reap every orphan it inherits.
	contain.OwnAllChildren()
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Main runs the corral command line and returns its exit code.
func Main(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "corral",
		Short:         "Run commands as contained process trees",
		Long:          rootLong,
		Example:       rootExamples,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("corral {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	root.AddCommand(runCommand(stdin, stdout, stderr), reapCommand(stdout),
		execCommand(stdin, stdout, stderr), lsCommand(stdout), killCommand(stdout), daemonCommand(stdout))
	root.AddCommand(tlsCommand(stdout))
	root.AddCommand(mcpCommand(stderr))
	root.AddCommand(holderCommand())
	root.AddCommand(termCommand(stdin, stdout), attachCommand(stdin, stdout, stderr))
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// cobra's own errors (unknown command, wrong argument count) are
		// usage errors.
		ee = &exitError{code: exitUsage, msg: err.Error(), usage: true}
	}
	switch {
	case ee.msg == "":
	case ee.usage:
		// One line, naming the help of the command that was misused.
		fmt.Fprintf(stderr, "corral: %s (see '%s --help')\n", ee.msg, cmd.CommandPath())
	default:
		fmt.Fprintf(stderr, "corral: %s\n", ee.msg)
	}
	return ee.code
}
