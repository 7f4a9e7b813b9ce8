//go:build !unix

package client

// processUmask: there is no umask to pass on; the daemon's applies.
func processUmask() *uint32 { return nil }
