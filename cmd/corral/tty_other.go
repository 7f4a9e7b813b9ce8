//go:build !unix

package main

import "os"

// inForeground is false where a terminal has no process groups to hand over.
func inForeground(f *os.File) bool { return false }
