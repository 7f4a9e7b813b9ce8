//go:build unix

package terminal

import (
	"os"
	"os/signal"
	"syscall"
)

const oNoFollow = syscall.O_NOFOLLOW

const supported = true

func notifyWinch(c chan os.Signal) { signal.Notify(c, syscall.SIGWINCH) }
