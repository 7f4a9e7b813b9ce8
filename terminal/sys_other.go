//go:build !unix

package terminal

import (
	"os"
)

const oNoFollow = 0

// supported is false: there is no PTY to hold here (Windows has ConPTY,
// which corral does not drive yet).
const supported = false

func notifyWinch(chan os.Signal) {}
