// Package wire is the protocol between the corral daemon and its clients:
// framing, messages, bounds, the version handshake, the error kinds, and
// the one conversion each way between corral.Result and its wire form.
//
// # Why it is written by hand
//
// It replaces the gRPC service (api/corralv1) that DESIGN.md calls the
// "gRPC adapter". Agents and CI call the corral CLI once per command, so
// the CLI's whole-process cost is what they feel, and Go runs the init of
// every linked package before main. Measured on the 2-core development
// machine (whole-process medians): an empty Go program 1.2-1.5 ms; a static
// binary with cobra, encoding/json and net 1.53 ms; with the protobuf
// runtime and our generated messages 2.01 ms; with google.golang.org/grpc
// 2.92 ms (gRPC's init alone is about 1.3 ms of CPU, GODEBUG=inittrace=1);
// and corral exec -s s -- true took 9.0 ms against 2.25 ms for bash -c
// true. What the daemon needs of a transport is small (one call at a time
// on a local socket, later on a TLS connection), so it is done here with
// the standard library alone: JSON for control messages, raw binary frames
// for output and stdin (no base64), every frame bounded.
//
// # Framing
//
// A connection (any net.Conn: the daemon's unix socket today, TLS over TCP
// later) carries frames both ways:
//
//	type    1 byte  (an ASCII letter, below)
//	length  4 bytes, big-endian: the payload's size
//	payload length bytes
//
// A control frame's payload is one JSON object (UTF-8); a data frame's is
// raw bytes. A frame longer than its bound is a protocol error: the
// receiver answers with an error frame (kind bad_request) if it can and
// closes the connection. Bounds: MaxHello (64 KiB) for the Hello,
// MaxControl (4 MiB) for any other control frame a client sends, MaxReply
// (64 MiB) for a reply the daemon sends (a terminal screen with its whole
// scrollback), MaxStdin (64 KiB) for a stdin frame; the daemon sends
// output in frames of at most
// MaxOutputChunk (64 KiB). A receiver reads a payload as it arrives, never
// allocating it whole from its header.
//
// # Handshake
//
// The client's first frame is Hello ('H'): {"protocol":"corral",
// "versions":[1,2]}, every protocol version it speaks. The daemon answers
// Welcome ('W'): {"version":2,"pid":N}, the highest version both speak, or
// an error frame of kind unsupported_version and closes. A client need
// not wait for the Welcome before it sends its first call. A later
// version can add fields (receivers ignore fields they do not know) or be
// negotiated here.
//
// Version 2 carries bytes that are not UTF-8 (bytes.go): shell code,
// environment entries, paths and the messages naming them are bytes on
// Unix, JSON text is UTF-8, and encoding/json replaces each invalid byte
// with U+FFFD. A field that can hold such bytes has a sibling NAME_bytes
// (base64), present only when the value is not UTF-8; it is then the
// value, and NAME its text with U+FFFD (or "", for the command and an
// environment entry). In an Exec: command_bytes, dir_bytes, cwd_bytes,
// and env_bytes {"I": base64}, which replaces env[I]; in a Result:
// cwd_bytes and error_bytes; in a Session: cwd_bytes. A call's JSON
// must still be valid UTF-8 as a whole (a raw invalid byte in it is
// refused, kind bad_request): such bytes travel only in _bytes fields. A
// client does not send _bytes fields to a daemon of version 1 (which
// would ignore them and run the text changed): it refuses the call.
// Output and stdin are data frames, bytes already.
//
// # Calls
//
// One call at a time per connection; a connection serves any number of
// calls in turn. A call is a Call frame ('C') whose JSON names it:
//
//	{"call":"exec","exec":{...Exec}}  run a command (below)
//	{"call":"resume","resume":{"job":J,"offset":N}}
//	                                  continue a detached exec's output (jobs.go)
//	{"call":"list"}                   reply {"sessions":[Session...]}
//	{"call":"kill","kill":{"names":[...],"all":false}}
//	                                  reply {"killed":[...]}
//	{"call":"status"}                 reply Status
//	{"call":"stop"}                   reply {}; the daemon then stops (sessions go on)
//
// Every call ends with exactly one Reply ('R', its JSON) or Error ('E':
// {"kind":K,"message":M}) frame; an exec call ends with a Result ('R', a
// Result object) or an Error.
//
// While an exec call runs, the daemon sends Stdout ('1') and Stderr ('2')
// data frames as the command writes, and the client may send:
//
//	'i' stdin data (only if the Exec said "stdin":true), at most MaxStdin
//	'e' stdin end of file (empty); stdin after it is a protocol error
//	'x' cancel: {"signal":N}, the first signal to send (0: SIGTERM), then
//	    the grace, then SIGKILL; output and the result follow once the
//	    tree is gone
//	'k' kill the tree at once (empty), also during a cancel's grace
//
// Any other frame during an exec (a second call, stdin not announced) is a
// protocol error: the command is stopped as by a cancel, and the call ends
// with an Error of kind bad_request saying what became of the command. A
// client that closes the connection abandons the call: the daemon stops
// the command without anyone waiting for it. A client that reads none of
// the output for the daemon's bound (30 s by default) has its command
// stopped; the call then ends with an Error of kind not_reading. A client
// that sends calls and reads none of their replies for that bound has its
// connection closed.
//
// Bounds on a connection: the Hello must arrive within HandshakeBound, and
// so must the rest of a call's frame once its header has; a connection may
// stay IdleBound without a call (then the daemon closes it: a client keeps
// idle connections for less); the daemon serves at most 64 connections at
// once: when all are open, a new one makes the daemon close the one that
// has waited longest for its next call (a client redials a reused
// connection closed so), and with none idle it waits in the listen
// backlog.
//
// Result (the reply of exec) carries every field of corral.Result, times
// as Unix nanoseconds and durations as nanoseconds, and also cwd (the
// session's working directory after the command) and state_not_saved
// (why the session's state after the command could not be recorded, ""
// when it was), limits and limits_changed (the session's resource limits
// after the command, and whether this command changed them). An exec
// that did not run ends with an Error instead; one that ran, whatever its
// outcome, with a Result (limits a session cannot enforce: outcome
// start_failed, nothing created or changed).
//
// An Exec's memory_max, memory_high, cpus and pids_max set the limits of
// the session it creates, or change those of an existing one in place
// (positive: set, -1: remove); a session command's accounting fields are
// deltas of the session's tree over the command, and its accounting
// says which peaks are the session's rather than the command's (see
// corral.Meter).
package wire
