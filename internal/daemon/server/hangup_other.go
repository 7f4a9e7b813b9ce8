//go:build !linux

package server

import "net"

// peerHungUp cannot tell here (no POLLRDHUP): a client that goes away
// while its command's stdin queue is full is noticed when the command
// reads or ends.
func peerHungUp(net.Conn) bool { return false }

// pending cannot tell here either.
func pending(net.Conn) bool { return false }
