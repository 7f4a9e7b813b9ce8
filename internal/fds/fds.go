// Package fds keeps a long-lived process from handing on descriptors it
// inherited.
//
// Go opens every descriptor of its own close-on-exec, but one a process
// inherits keeps whatever flag its parent gave it. A daemon started by a
// client inherits the client's descriptors beyond 0-2 (a caller's pipe, a
// make jobserver, a terminal), and passing them on to every shell it
// starts would keep them open for the daemon's whole life: a caller that
// reads such a pipe to EOF would wait as long.
package fds
