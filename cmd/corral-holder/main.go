// Command corral-holder holds one terminal session: the same role as the
// hidden `corral holder`, in a binary that carries nothing else. A holder
// is the per-session cost, and corral's own binary pays for its CLI,
// wire, TLS and MCP packages in every process at start-up (their package
// initialisers run whatever the subcommand): about 1.9 MiB of private
// memory per idle holder against 1.3 MiB for this one, with 50 sessions
// (an idle Go program: 0.9 MiB; BenchmarkHolderIdleMemory). Built with
// CGO_ENABLED=0 it links neither libc nor the dynamic loader and costs
// about 0.1 MiB less. `corral daemon --holder PATH` (terminal.Config.Holder)
// runs it.
package main

import (
	"os"

	"github.com/corral-dev/corral/internal/holder"
)

func main() { os.Exit(holder.Main(os.Stdin, os.Stdout, os.Stderr)) }
