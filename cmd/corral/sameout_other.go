//go:build !linux

package main

import "io"

// merged keeps the streams apart where the kernel cannot say whether two
// descriptors are one open file.
func merged(stdout, stderr io.Writer) (io.Writer, io.Writer) { return stdout, stderr }
