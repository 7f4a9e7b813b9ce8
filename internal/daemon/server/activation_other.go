//go:build !unix

package server

import "net"

// activated: socket activation is a unix protocol; nothing is passed
// here.
func activated(sock string) (net.Listener, error) { return nil, nil }
