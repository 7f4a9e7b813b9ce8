//go:build !unix

package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corral-dev/corral"
)

var errUnusable = errors.New("shell gone before the command was submitted")

func lookShell(sh string) (string, error) {
	return "", fmt.Errorf("session: %w", ErrUnsupported)
}

// cmdPipe is a command's own output FIFO: none here.
type cmdPipe struct{}

type shell struct {
	fifos Fifos
	tree  *corral.Tree // never set: no shell starts here
}

func startShell(ctx context.Context, cfg *Config) (*shell, error) {
	return nil, fmt.Errorf("session: %w", ErrUnsupported)
}

// Attach needs a POSIX shell: there is none to take over here.
func Attach(cfg Config, id corral.Identity, last State) (*Session, error) {
	return nil, fmt.Errorf("session: %w", ErrUnsupported)
}

func removeHeld(string) {}

// CanAttach reports whether Attach can take a held shell over: not here.
func CanAttach() bool { return false }

func (sh *shell) detach()                             {}
func (sh *shell) pid() int                            { return 0 }
func (sh *shell) isDead() bool                        { return true }
func (sh *shell) markClosing()                        {}
func (sh *shell) stop(grace time.Duration) error      { return nil }
func (sh *shell) lastState() (string, []string, bool) { return "", nil, false }
func (sh *shell) exec(ctx context.Context, code string, opts Options, dir string) (*corral.Result, error) {
	return startFailed(fmt.Errorf("session: %w", ErrUnsupported))
}
