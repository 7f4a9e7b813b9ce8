package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/internal/holder"
)

// holderCommand is the hidden role that holds one terminal session (see
// internal/holder): started by terminal.Open with the session's spec as
// JSON on its standard input, never by hand.
func holderCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "holder",
		Short:              "Hold one terminal session (started by corral, not by hand)",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if code := holder.Main(os.Stdin, os.Stdout, os.Stderr); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}
