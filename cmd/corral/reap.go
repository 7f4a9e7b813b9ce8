package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/internal/record"
	"github.com/corral-dev/corral/internal/statedir"
)

func reapCommand(stdout io.Writer) *cobra.Command {
	var dry, asJSON bool
	c := &cobra.Command{
		Use:   "reap [--dry-run] [--json]",
		Short: "Kill the trees of corral runs that died",
		Long: `Kill every recorded tree whose 'corral run' is gone (killed with SIGKILL,
crashed), and remove its record. A tree is found only through its record:
its cgroup, or its root's pid checked against the recorded start time and
boot id, its process group and its marker. Nothing else is ever signalled,
and running reap twice is harmless.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := statedir.Path()
			if err == nil {
				dir, err = statedir.Ensure(dir, "runs")
			}
			if err != nil {
				return &exitError{code: exitInternal, msg: err.Error()}
			}
			out, errs := record.Reap(record.Store{Dir: dir}, dry)
			failed := len(errs) > 0
			for _, r := range out {
				failed = failed || r.Action == record.Failed
			}
			if asJSON {
				if out == nil {
					out = []record.Reaped{}
				}
				msgs := []string{}
				for _, e := range errs {
					msgs = append(msgs, e.Error())
				}
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				enc.Encode(map[string]any{"trees": out, "errors": msgs})
			} else {
				w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ACTION\tID\tISOLATION\tPIDS\tCOMMAND\tERROR")
				for _, r := range out {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Action, r.Record.ID, r.Record.Isolation,
						pidColumn(r.Pids), strings.Join(r.Record.Argv, " "), r.Error)
				}
				w.Flush()
				for _, e := range errs {
					fmt.Fprintf(stdout, "unusable record: %v\n", e)
				}
			}
			if failed {
				return &exitError{code: 1, msg: "some trees could not be reaped"}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&dry, "dry-run", false, "list what would be killed and removed; change nothing")
	c.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	return c
}
