//go:build !unix

package holder

import (
	"os"

	"github.com/corral-dev/corral/internal/term"
)

const oNoFollow = 0

func unixGetsid() int { return os.Getpid() }

func unixSetsid() error { return term.ErrUnsupported }

func dupStdin(*os.File) error { return term.ErrUnsupported }

func releaseStdin() error { return nil }
