//go:build unix

package terminal

import (
	"bytes"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// holderAttr starts the holder as the leader of a new session, so that it
// can take the PTY as its controlling terminal and nothing of its
// starter's session (a hangup, a group signal) reaches it.
func holderAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

const oNoFollow = syscall.O_NOFOLLOW

const supported = true

func notifyWinch(c chan os.Signal) { signal.Notify(c, syscall.SIGWINCH) }
