package store

import "github.com/corral-dev/corral"

// Kind is what a session is.
type Kind string

const (
	// KindExec is a shell that runs one command at a time (the only kind
	// before terminal sessions: a record without a kind is one).
	KindExec Kind = "exec"
	// KindTerminal is a program on a PTY served by a holder process.
	KindTerminal Kind = "terminal"
)

// KindOf is rec's kind, KindExec for records written without one.
func KindOf(rec *Session) Kind {
	if rec.Kind == "" {
		return KindExec
	}
	return rec.Kind
}

// Term is what a terminal session runs, and how, kept so that a session
// found down (after a reboot) starts again as it was opened: its program
// afresh, in the record's Cwd and Env. The session's holder is the
// record's Tree (its identity, written before the holder ran); the
// program's own tree, inside the holder's, is Program.
type Term struct {
	// Command is the program and its arguments (Command[0] is looked up
	// in PATH of Env).
	Command []string `json:"command"`
	// Cols and Rows are the window's size as last set.
	Cols int `json:"cols"`
	Rows int `json:"rows"`
	// SizePolicy says whose size the window takes when clients attach:
	// "" or "typed" (the most recent client that typed), "smallest",
	// "largest", or "fixed" (only term resize changes it).
	SizePolicy string `json:"size_policy,omitempty"`
	// Program is the identity of the program's tree while a holder runs
	// it (as the holder reported it), for a reap when the holder is gone.
	Program *corral.Identity `json:"program,omitempty"`
}
