package main

import (
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/term"
)

// outputTTY gives the command a terminal of its own for its output when
// corral's stdout is one (as the command would have run directly or under
// timeout), and keeps its size following the real one: on SIGWINCH when
// corral gets it, and every 250 ms (while the tree holds the terminal's
// foreground, the kernel sends SIGWINCH to the tree, not to corral). It
// returns a function that stops the following.
func outputTTY(cmd *corral.Cmd, stdout io.Writer) (stop func()) {
	f, ok := stdout.(*os.File)
	if !ok {
		return func() {}
	}
	if !term.IsTerminal(f) {
		return func() {}
	}
	resize := make(chan struct{}, 1)
	cmd.OutputTTY, cmd.OutputTTYResize = f, resize
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-winch:
			case <-tick.C:
			}
			select {
			case resize <- struct{}{}:
			default:
			}
		}
	}()
	return func() { signal.Stop(winch); close(done); <-ended }
}
