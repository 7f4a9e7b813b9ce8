package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-dev/corral/client"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/term"
	"github.com/corral-dev/corral/terminal"
)

// Terminal tools: term_open, term_send, term_screen and term_wait, with
// the fields of the corral term verbs, for programs that do not end (a
// REPL, an editor, an installer that asks questions, another agent).

// termDaemon is what the terminal tools need of the daemon's client
// (*client.Client has it).
type termDaemon interface {
	TermOpen(ctx context.Context, name string, o client.TermOpenOptions) (*client.TermOpened, error)
	TermSendKeys(ctx context.Context, name string, text []byte, keys []string) error
	TermScreen(ctx context.Context, name string, o client.TermScreenOptions) (*client.TermScreen, error)
	TermWait(ctx context.Context, name string, o client.TermWaitOptions) (*client.TermWaited, error)
}

// termToolNames are the terminal tools' names.
var termToolNames = []string{"term_open", "term_send", "term_screen", "term_wait"}

// Bounds of term_wait: a tool call must return before an MCP client cuts
// it (60 s by default), so a longer wait is made of several calls.
const (
	DefaultTermWait = 10 * time.Second
	MaxTermWait     = 55 * time.Second
)

// addTermTools registers the terminal tools on m.
func (s *Server) addTermTools(m *mcp.Server) {
	mcp.AddTool(m, &mcp.Tool{Name: "term_open", InputSchema: inputSchema[TermOpenInput](), Description: "Start a program on a terminal " +
		"(a PTY kept by the corral daemon, surviving it) in a named terminal session: a REPL, an editor, an installer, another agent. " +
		"Drive it with term_send, read it with term_screen, wait on it with term_wait; kill_session ends it."}, s.termOpen)
	mcp.AddTool(m, &mcp.Tool{Name: "term_send", InputSchema: inputSchema[TermSendInput](), Description: "Type text and/or named keys " +
		"(tmux notation: Enter, Tab, Escape, BSpace, Up, Down, Left, Right, PageUp, F1..F12, C-c, M-x, ...) into a terminal session. " +
		"Text is typed as is, with no Enter unless you add the key."}, s.termSend)
	mcp.AddTool(m, &mcp.Tool{Name: "term_screen", InputSchema: inputSchema[TermScreenInput](), Description: "The current screen of a " +
		"terminal session as text (with scrollback N, first the newest N rows that scrolled off the top, oldest first), with its size, cursor, title, whether the alternate " +
		"screen is on, and the program's exit status once it exited. " + screenBoundDoc}, s.termScreen)
	mcp.AddTool(m, &mcp.Tool{Name: "term_wait", InputSchema: inputSchema[TermWaitInput](), Description: "Wait until a terminal session's " +
		"screen matches text (a regular expression; ^ and $ match at each row, trailing blanks trimmed), its output is quiet for idle_ms, or (exit) its program " +
		"exits; at most timeout_ms (default 10000, max 55000: call again to wait longer). Returns why, and the screen (with scrollback, as term_screen's). " +
		screenBoundDoc}, s.termWait)
}

// screenBoundDoc says how a terminal tool's reply is bounded.
const screenBoundDoc = "Past max_output_bytes (default 30000) the reply keeps the head and the tail of the scrollback and screen, " +
	"at row boundaries, with one line between them saying how many bytes were left out and where the whole is (output_file, kept as exec's). " +
	"The scrollback is cut first: the screen itself is always whole (up to 524288 bytes), even past max_output_bytes."

func (s *Server) termClient(ctx context.Context) (Daemon, termDaemon, error) {
	d, err := s.daemon(ctx)
	if err != nil {
		return nil, nil, err
	}
	td, ok := d.(termDaemon)
	if !ok {
		return nil, nil, errors.New("this daemon client has no terminal sessions")
	}
	return d, td, nil
}

// termCallErr is a failed terminal call's error for the agent (and
// forgets a daemon that went away).
func (s *Server) termCallErr(d Daemon, tool string, err error) error {
	s.lost(d, err)
	return fmt.Errorf("%s: %w", tool, err)
}

// TermOpenInput is the input of term_open.
type TermOpenInput struct {
	Name    string            `json:"name" jsonschema:"the terminal session's name ([A-Za-z0-9][A-Za-z0-9._-]*)"`
	Command []string          `json:"command,omitempty" jsonschema:"the program and its arguments, one per item (default: the user's shell)"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"the program's working directory, an absolute path (default: the server's)"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"variables added to the program's environment"`
	Size    string            `json:"size,omitempty" jsonschema:"the window's size as COLSxROWS (default 80x24)"`
	// Existing: an open session of that name is no error.
	Existing Bool `json:"existing,omitempty" jsonschema:"if the session is open already, use it rather than fail"`
}

// TermOpenOutput is the reply of term_open.
type TermOpenOutput struct {
	Name      string   `json:"name"`
	Created   bool     `json:"created" jsonschema:"a new session"`
	Started   bool     `json:"started" jsonschema:"its program was started (new, or it was down after a reboot)"`
	HolderPid int      `json:"holder_pid"`
	Cols      int      `json:"cols"`
	Rows      int      `json:"rows"`
	Command   []string `json:"command,omitempty"`
}

func (s *Server) termOpen(ctx context.Context, req *mcp.CallToolRequest, in TermOpenInput) (*mcp.CallToolResult, *TermOpenOutput, error) {
	if err := store.CheckName(in.Name); err != nil {
		return nil, nil, fmt.Errorf("name: %w", err)
	}
	o := client.TermOpenOptions{Command: in.Command, Cwd: in.Cwd, Existing: bool(in.Existing)}
	if o.Cwd == "" {
		o.Cwd = s.cfg.Dir
	} else if !filepath.IsAbs(o.Cwd) {
		return nil, nil, fmt.Errorf("cwd %q must be an absolute path", o.Cwd)
	}
	if len(o.Command) > 0 && o.Command[0] == "" {
		return nil, nil, errors.New("command: its first item, the program, is empty")
	}
	if in.Size != "" {
		cols, rows, err := term.ParseSize(in.Size)
		if err != nil {
			return nil, nil, err
		}
		o.Cols, o.Rows = cols, rows
	}
	keys := make([]string, 0, len(in.Env))
	for k := range in.Env {
		if !validEnvName(k) {
			return nil, nil, fmt.Errorf("env: %q is not a variable name", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !s.cfg.NoAgentEnv {
		o.Env = append(o.Env, AgentEnv...)
	}
	for _, k := range keys {
		o.Env = append(o.Env, k+"="+in.Env[k])
	}
	d, td, err := s.termClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	r, err := td.TermOpen(ctx, in.Name, o)
	if err != nil {
		return nil, nil, s.termCallErr(d, "term_open", err)
	}
	out := &TermOpenOutput{Name: r.Name, Created: r.Created, Started: r.Started, HolderPid: r.HolderPid, Cols: r.Cols, Rows: r.Rows, Command: r.Command}
	msg := fmt.Sprintf("terminal session %s: %s at %dx%d (holder pid %d)", r.Name, strings.Join(r.Command, " "), r.Cols, r.Rows, r.HolderPid)
	if !r.Started {
		msg = fmt.Sprintf("terminal session %s was open already (%dx%d)", r.Name, r.Cols, r.Rows)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, out, nil
}

// TermSendInput is the input of term_send.
type TermSendInput struct {
	Name string   `json:"name"`
	Text string   `json:"text,omitempty" jsonschema:"text to type, as is (sent first)"`
	Keys []string `json:"keys,omitempty" jsonschema:"key names to press after the text, in tmux notation: Enter, Tab, Escape, BSpace, Up, C-c, M-x, F5..."`
}

// TermSendOutput is the reply of term_send.
type TermSendOutput struct {
	Bytes int `json:"bytes" jsonschema:"how many bytes were typed"`
}

func (s *Server) termSend(ctx context.Context, req *mcp.CallToolRequest, in TermSendInput) (*mcp.CallToolResult, *TermSendOutput, error) {
	if err := store.CheckName(in.Name); err != nil {
		return nil, nil, fmt.Errorf("name: %w", err)
	}
	if in.Text == "" && len(in.Keys) == 0 {
		return nil, nil, errors.New("give text, keys or both")
	}
	data := []byte(in.Text)
	b, err := terminal.Keys(in.Keys...)
	if err != nil {
		return nil, nil, fmt.Errorf("keys: %w", err)
	}
	d, td, err := s.termClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := td.TermSendKeys(ctx, in.Name, data, in.Keys); err != nil {
		return nil, nil, s.termCallErr(d, "term_send", err)
	}
	data = append(data, b...) // as many bytes, whatever the cursor-key mode
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("sent %d bytes to %s", len(data), in.Name)}}},
		&TermSendOutput{Bytes: len(data)}, nil
}

// TermScreenInput is the input of term_screen.
type TermScreenInput struct {
	Name       string `json:"name"`
	ANSI       Bool   `json:"ansi,omitempty" jsonschema:"with the text's attributes as ANSI escape sequences"`
	Scrollback *Int   `json:"scrollback,omitempty" jsonschema:"also the newest N scrollback rows (-1: all)"`
	// MaxOutputBytes as exec's.
	MaxOutputBytes *Int `json:"max_output_bytes,omitempty" jsonschema:"most bytes of scrollback and screen the reply carries (head and tail past it, scrollback cut first; the screen is always whole); default 30000, at most 524288"`
}

// TermScreenOutput is a terminal session's screen.
type TermScreenOutput struct {
	Text          string   `json:"text" jsonschema:"the screen's rows, each ended by a newline (never cut by max_output_bytes; a screen past 524288 bytes comes as its last rows after a row saying what was left out)"`
	Scrollback    []string `json:"scrollback,omitempty" jsonschema:"the newest scrollback rows asked for, oldest first; past max_output_bytes the first and the last of them with a row between saying what was left out"`
	Cols          int      `json:"cols"`
	Rows          int      `json:"rows"`
	CursorX       int      `json:"cursor_x" jsonschema:"0-based column"`
	CursorY       int      `json:"cursor_y" jsonschema:"0-based row"`
	CursorVisible bool     `json:"cursor_visible"`
	Title         string   `json:"title,omitempty"`
	AltScreen     bool     `json:"alt_screen" jsonschema:"the program uses the alternate screen (a full-screen program)"`
	Exited        bool     `json:"exited" jsonschema:"the program has exited"`
	ExitCode      *int     `json:"exit_code,omitempty" jsonschema:"its exit code once it exited (-1: killed by a signal)"`
	// Truncated and the rest are set when max_output_bytes cut the reply.
	Truncated    bool   `json:"truncated,omitempty" jsonschema:"the scrollback and screen are their head and tail, with one row between (in scrollback, or text's first when the screen alone was past 524288 bytes) saying what was left out"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty" jsonschema:"bytes of the whole text (scrollback rows and screen, each row ended by a newline) left out"`
	OutputFile   string `json:"output_file,omitempty" jsonschema:"the whole text, scrollback rows then screen (up to 64 MiB), kept 24 h under the state directory"`
}

func screenOut(sc *client.TermScreen) *TermScreenOutput {
	o := &TermScreenOutput{Text: sc.Text, Scrollback: sc.Scrollback, Cols: sc.Cols, Rows: sc.Rows, CursorX: sc.CursorX, CursorY: sc.CursorY,
		CursorVisible: sc.CursorVisible, Title: sc.Title, AltScreen: sc.AltScreen, Exited: sc.Status.Exited}
	if sc.Status.Exited {
		code := sc.Status.ExitCode
		o.ExitCode = &code
	}
	return o
}

func (s *Server) termScreen(ctx context.Context, req *mcp.CallToolRequest, in TermScreenInput) (*mcp.CallToolResult, *TermScreenOutput, error) {
	if err := store.CheckName(in.Name); err != nil {
		return nil, nil, fmt.Errorf("name: %w", err)
	}
	o := client.TermScreenOptions{ANSI: bool(in.ANSI)}
	var err error
	if o.Scrollback, err = scrollbackArg(in.Scrollback); err != nil {
		return nil, nil, err
	}
	max, err := maxArg(in.MaxOutputBytes)
	if err != nil {
		return nil, nil, err
	}
	d, td, err := s.termClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	sc, err := td.TermScreen(ctx, in.Name, o)
	if err != nil {
		return nil, nil, s.termCallErr(d, "term_screen", err)
	}
	out := screenOut(sc)
	s.boundScreen(in.Name, out, max)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: screenText(out)}}}, out, nil
}

func scrollbackArg(v *Int) (int, error) {
	if v == nil {
		return 0, nil
	}
	if *v < -1 {
		return 0, fmt.Errorf("scrollback must be a number of rows, or -1 for all (got %d)", *v)
	}
	return int(*v), nil
}

// boundScreen cuts o's scrollback rows and screen, as one text, to max
// bytes as exec's output is cut (the head, a line saying what was left out
// and where the whole is, the tail), at row boundaries. The tail always
// holds the whole screen: only the scrollback is cut, and a screen larger
// than max is given whole with no scrollback, up to MaxReplyBytes (only a
// larger screen, past about 700x700 or with ansi on a big window, is cut
// itself, to its last rows). The whole text is then written to a file in
// mcp-output/, named in o.OutputFile, bounded and expired as a job's.
func (s *Server) boundScreen(name string, o *TermScreenOutput, max int) {
	var b []byte
	for _, r := range o.Scrollback {
		b = append(append(b, r...), '\n')
	}
	sb := int64(len(b))
	b = append(b, o.Text...)
	total := int64(len(b))
	screen := total - sb
	budget := int64(max)
	if screen > budget {
		budget = min(screen, MaxReplyBytes)
	}
	if total <= budget {
		return
	}
	head, tail := budget/2, budget/2 // as exec's
	if screen > tail {
		tail = min(screen, budget)
		head = budget - tail
	}
	c := cut(func(from, to int64) ([]byte, bool) { return b[from:to], true }, 0, total, head, tail, true)

	dir := s.outDir
	if s.dirErr != nil {
		dir = ""
	}
	f := newOutput(dir, "screen-"+name+"-"+newJobID()[1:]) // a random id, no job's
	if s.dirErr != nil {
		f.fileErr = s.dirErr.Error()
	}
	f.Write(b)
	f.close()
	var r reply
	text := c.join(f.where(&r))
	s.maybeSweep()

	o.Truncated, o.OmittedBytes, o.OutputFile = true, c.omitted, r.outputFile
	o.Scrollback = nil
	if int64(len(c.tail)) < screen { // the screen was cut: all of it is in text
		o.Text = text
		return
	}
	o.Text = text[len(text)-int(screen):]
	o.Scrollback = strings.Split(strings.TrimSuffix(text[:len(text)-int(screen)], "\n"), "\n")
}

// screenText is a screen as an agent reads it: the rows, then a line of
// facts.
func screenText(o *TermScreenOutput) string {
	var b strings.Builder
	for _, r := range o.Scrollback {
		b.WriteString(r + "\n")
	}
	b.WriteString(o.Text)
	fmt.Fprintf(&b, "[%dx%d, cursor %d,%d", o.Cols, o.Rows, o.CursorX, o.CursorY)
	if o.AltScreen {
		b.WriteString(", alternate screen")
	}
	if o.Exited {
		fmt.Fprintf(&b, ", program exited %d", *o.ExitCode)
	}
	b.WriteString("]")
	return b.String()
}

// TermWaitInput is the input of term_wait.
type TermWaitInput struct {
	Name      string `json:"name"`
	Text      string `json:"text,omitempty" jsonschema:"a regular expression (Go syntax) the screen must match"`
	IdleMs    *Int   `json:"idle_ms,omitempty" jsonschema:"return once no output came for this many milliseconds"`
	Exit      Bool   `json:"exit,omitempty" jsonschema:"return once the program exits"`
	TimeoutMs *Int   `json:"timeout_ms,omitempty" jsonschema:"give up after this many milliseconds (default 10000, at most 55000)"`
	// Scrollback and MaxOutputBytes as term_screen's, for the screen the
	// reply carries.
	Scrollback     *Int `json:"scrollback,omitempty" jsonschema:"the reply's screen comes with the newest N scrollback rows (-1: all)"`
	MaxOutputBytes *Int `json:"max_output_bytes,omitempty" jsonschema:"most bytes of scrollback and screen the reply carries (head and tail past it, scrollback cut first; the screen is always whole); default 30000, at most 524288"`
}

// TermWaitOutput is the reply of term_wait.
type TermWaitOutput struct {
	Reason string            `json:"reason" jsonschema:"text, idle, exit or timeout"`
	Match  string            `json:"match,omitempty" jsonschema:"the text that matched"`
	Screen *TermScreenOutput `json:"screen"`
}

func (s *Server) termWait(ctx context.Context, req *mcp.CallToolRequest, in TermWaitInput) (*mcp.CallToolResult, *TermWaitOutput, error) {
	if err := store.CheckName(in.Name); err != nil {
		return nil, nil, fmt.Errorf("name: %w", err)
	}
	idle, err := msArg("idle_ms", in.IdleMs, 0, 1, 0)
	if err != nil {
		return nil, nil, err
	}
	timeout, err := msArg("timeout_ms", in.TimeoutMs, DefaultTermWait, 0, MaxTermWait)
	if err != nil {
		return nil, nil, err
	}
	if in.Text == "" && idle == 0 && !in.Exit {
		return nil, nil, errors.New("give what to wait for: text, idle_ms or exit")
	}
	scrollback, err := scrollbackArg(in.Scrollback)
	if err != nil {
		return nil, nil, err
	}
	max, err := maxArg(in.MaxOutputBytes)
	if err != nil {
		return nil, nil, err
	}
	d, td, err := s.termClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	w, err := td.TermWait(ctx, in.Name, client.TermWaitOptions{Text: in.Text, Idle: idle, Exit: bool(in.Exit), Timeout: timeout})
	if err != nil {
		return nil, nil, s.termCallErr(d, "term_wait", err)
	}
	sc, err := td.TermScreen(ctx, in.Name, client.TermScreenOptions{Scrollback: scrollback})
	if err != nil {
		return nil, nil, s.termCallErr(d, "term_wait", err)
	}
	out := &TermWaitOutput{Reason: w.Reason, Match: w.Match, Screen: screenOut(sc)}
	s.boundScreen(in.Name, out.Screen, max)
	head := "waited: " + w.Reason
	if w.Reason == "timeout" {
		head = fmt.Sprintf("waited: timeout after %v (call term_wait again to wait longer)", timeout)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: head + "\n" + screenText(out.Screen)}}}, out, nil
}
