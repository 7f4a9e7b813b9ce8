//go:build !linux

package corral

import (
	"errors"
	"os"
)

// openOutputPTY: only Linux gives a root a pseudo-terminal for its output;
// elsewhere Cmd.OutputTTY falls back to pipes.
func openOutputPTY(tty *os.File) (master, slave *os.File, err error) {
	return nil, nil, errors.ErrUnsupported
}

func dupFile(f *os.File) (*os.File, error) { return nil, errors.ErrUnsupported }

func followSize(master, tty *os.File, resize <-chan struct{}, stop <-chan struct{}, ended chan<- struct{}) {
	close(ended)
}
