// Package vt is the screen model of terminal sessions: a VT/xterm
// emulator fed a program's PTY output that keeps the screen, the cursor,
// the modes and a scrollback budgeted in bytes, and renders them as text
// (tmux capture-pane -p), as text with attributes (capture-pane -e), or as
// the bytes that repaint an outer terminal to the same state and reset it
// on detach.
package vt
