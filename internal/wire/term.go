package wire

// Terminal sessions on the wire (additive to version 1: new call names,
// new frame types used only during a term_attach call).
//
//	{"call":"term_open","term":{...Term}}    reply TermOpened
//	{"call":"term_send","term":{"name":N,"data":B64,"keys":[K...]}}  reply {}
//	{"call":"term_screen","term":{"name":N,"ansi":b,"scrollback":n}}
//	                                         reply TermScreen
//	{"call":"term_wait","term":{"name":N,"text":RE,"idle_ms":n,"exit":b,"timeout_ms":n}}
//	                                         reply TermWaited
//	{"call":"term_resize","term":{"name":N,"cols":c,"rows":r}} reply {}
//	{"call":"term_attach","term":{"name":N,"cols":c,"rows":r,"read_only":b,"scrollback":n}}
//
// A term_attach that succeeds is answered with a TermOpened reply ('R'),
// then turns the connection into a stream until it ends: the daemon
// sends FrameTermOutput data, the bytes to write to the client's
// terminal as they are (a redraw of the screen first, then the live
// output; a client that fell behind gets a redraw in place of what it
// missed; at the end, the bytes that undo the program's modes on its
// terminal); the client sends FrameStdin (input), FrameTermResize (a
// TermSize) and FrameTermDetach (empty). The stream ends with one more
// 'R' frame, a TermEnded (after a detach, or the program's exit with
// its status), or an 'E'; the daemon then closes the connection. A
// client that closes the connection detaches. A term_wait ends early,
// with no reply, when its client closes the connection.

// Call names of terminal sessions.
const (
	CallTermOpen   = "term_open"
	CallTermSend   = "term_send"
	CallTermScreen = "term_screen"
	CallTermWait   = "term_wait"
	CallTermResize = "term_resize"
	CallTermAttach = "term_attach"
)

// IsTermCall reports whether name is one of the terminal calls.
func IsTermCall(name string) bool {
	switch name {
	case CallTermOpen, CallTermSend, CallTermScreen, CallTermWait, CallTermResize, CallTermAttach:
		return true
	}
	return false
}

// Frame types of an attach stream.
const (
	FrameTermOutput byte = 'o' // daemon: bytes for the client's terminal
	FrameTermResize byte = 'r' // client: TermSize
	FrameTermDetach byte = 'd' // client: detach
)

// Term is the argument of a terminal call; each call reads the fields
// its line above names.
type Term struct {
	Name string `json:"name"`
	// term_open: the program (nil: the user's shell), its cwd (absolute)
	// and environment, the window's size (0: 80x24), the size policy
	// (typed, smallest, largest, fixed), and Existing: an existing
	// session is joined (started again if it is down), not an error.
	Command    []string `json:"command,omitempty"`
	Cwd        string   `json:"cwd,omitempty"`
	Env        []string `json:"env,omitempty"`
	Cols       int      `json:"cols,omitempty"`
	Rows       int      `json:"rows,omitempty"`
	SizePolicy string   `json:"size_policy,omitempty"`
	Existing   bool     `json:"existing,omitempty"`
	// term_send: the bytes to type, then the keys to press (tmux's
	// names; the daemon sends them as the program's cursor-key mode
	// wants).
	Data []byte   `json:"data,omitempty"`
	Keys []string `json:"keys,omitempty"`
	// term_screen: with attributes (SGR), and how many scrollback rows
	// (-1: all); term_attach: how many the redraw starts with.
	ANSI       bool `json:"ansi,omitempty"`
	Scrollback int  `json:"scrollback,omitempty"`
	// term_wait: a regular expression over the screen's rows, quiet
	// output for IdleMs, the program's exit; bounded by TimeoutMs.
	Text      string `json:"text,omitempty"`
	IdleMs    int64  `json:"idle_ms,omitempty"`
	Exit      bool   `json:"exit,omitempty"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	// term_attach: use none of this client's input or size.
	ReadOnly bool `json:"read_only,omitempty"`
}

// TermOpened is the reply to term_open and term_attach.
type TermOpened struct {
	Name      string   `json:"name"`
	Created   bool     `json:"created,omitempty"`
	Started   bool     `json:"started,omitempty"`
	HolderPid int      `json:"holder_pid"`
	Cols      int      `json:"cols"`
	Rows      int      `json:"rows"`
	Command   []string `json:"command,omitempty"`
}

// TermStatus is the state of a terminal session's program.
type TermStatus struct {
	HolderPid int `json:"holder_pid"`
	Pid       int `json:"pid"`
	// Exited is set once the program's tree has settled; ExitCode (-1:
	// killed by Signal), Outcome and Error say how.
	Exited   bool   `json:"exited"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Error    string `json:"error,omitempty"`
}

// TermScreen is the reply to term_screen.
type TermScreen struct {
	Cols          int        `json:"cols"`
	Rows          int        `json:"rows"`
	Text          string     `json:"text"`
	Scrollback    []string   `json:"scrollback,omitempty"`
	CursorX       int        `json:"cursor_x"`
	CursorY       int        `json:"cursor_y"`
	CursorVisible bool       `json:"cursor_visible"`
	Title         string     `json:"title,omitempty"`
	AltScreen     bool       `json:"alt_screen"`
	Status        TermStatus `json:"status"`
}

// TermWaited is the reply to term_wait: Reason is text, idle, exit or
// timeout; Match the text that matched.
type TermWaited struct {
	Reason string     `json:"reason"`
	Match  string     `json:"match,omitempty"`
	Status TermStatus `json:"status"`
}

// TermSize is a window size.
type TermSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// TermEnded is the last reply of an attach stream: Detached, or the
// program's exit (Status.Exited).
type TermEnded struct {
	Detached bool       `json:"detached,omitempty"`
	Status   TermStatus `json:"status"`
}

// TermInfo is what a listing adds for a terminal session.
type TermInfo struct {
	Command    []string `json:"command,omitempty"`
	Cols       int      `json:"cols"`
	Rows       int      `json:"rows"`
	SizePolicy string   `json:"size_policy,omitempty"`
	HolderPid  int      `json:"holder_pid,omitempty"`
	Exited     bool     `json:"exited,omitempty"`
	ExitCode   int      `json:"exit_code,omitempty"`
}
