// Command corral-holder holds one terminal session: the same role as the
// hidden `corral holder`, in a binary that carries nothing else. A holder
// is the per-session cost, and corral's own binary pays for its gRPC,
// protobuf and CLI packages in every process at start-up (their package
// initialisers run whatever the subcommand): about 2.2 MiB of private
// memory per holder against 1.0 MiB for this one (BenchmarkHolderIdleMemory).
// terminal.Config.Holder names it.
package main

import (
	"os"

	"github.com/corral-dev/corral/internal/holder"
)

func main() { os.Exit(holder.Main(os.Stdin, os.Stdout, os.Stderr)) }
