//go:build !linux

package main

import (
	"io"

	"github.com/corral-dev/corral"
)

func outputTTY(cmd *corral.Cmd, stdout io.Writer) (stop func()) { return func() {} }
