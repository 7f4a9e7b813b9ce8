package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/statedir"
)

// completeSessions offers the names of the sessions, from the daemon if
// one is running. Completion never starts a daemon (nor creates a state
// directory): with none running it offers nothing.
func completeSessions(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	dir, err := statedir.Path()
	if err != nil || !daemonListening(dir) {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, dir)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer c.Close()
	list, err := c.List(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	given := map[string]bool{}
	for _, a := range args {
		given[a] = true
	}
	var names []string
	for _, s := range list {
		if strings.HasPrefix(s.Name, toComplete) && !given[s.Name] {
			names = append(names, s.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
