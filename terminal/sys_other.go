//go:build !unix

package terminal

import (
	"bytes"
	"io"
	"os"
	"syscall"
)

func holderAttr() *syscall.SysProcAttr { return nil }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

const oNoFollow = 0

// supported is false: there is no PTY to hold here (Windows has ConPTY,
// which corral does not drive yet).
const supported = false

func notifyWinch(chan os.Signal) {}
