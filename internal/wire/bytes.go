package wire

import (
	"fmt"
	"unicode/utf8"
)

// Shell code, environment entries, paths and the messages that name them
// are bytes on Unix, and JSON text is UTF-8: encoding/json silently
// replaces every byte that is not UTF-8 with U+FFFD. So each field that
// can hold such bytes has a sibling, NAME_bytes (base64, as encoding/json
// writes a []byte), present only when the value is not valid UTF-8: then
// it is the value, exactly, and NAME holds it with U+FFFD in place of each
// invalid byte (or "" where the text would only repeat the bytes: the
// command, an environment entry). A receiver that knows NAME_bytes uses
// it; one that does not sees readable text. A value that is valid UTF-8
// (nearly every one) travels as plain text, as in version 1, and costs a
// validity check. Why not one custom type with a MarshalJSON: encoding/json
// re-scans what a marshaller returns and calls an unmarshaller once per
// value, which for an environment of hundreds of entries costs more than
// the whole fast path does today.

// bytesOf is s for a NAME_bytes field: nil when s is valid UTF-8 (NAME
// carries it).
func bytesOf(s string) []byte {
	if utf8.ValidString(s) {
		return nil
	}
	return []byte(s)
}

// textOf is the value that NAME (s) and NAME_bytes (b) carry.
func textOf(s string, b []byte) string {
	if b != nil {
		return string(b)
	}
	return s
}

// EncodeBytes moves each of e's fields that is not valid UTF-8 into its
// _bytes sibling, and reports whether there was one (only a daemon of
// VersionBytes or later reads them). e.Env is copied before it is changed:
// the caller's slice is left as it was.
func (e *Exec) EncodeBytes() bool {
	if e.CommandBytes = bytesOf(e.Command); e.CommandBytes != nil {
		e.Command = ""
	}
	e.DirBytes, e.CwdBytes = bytesOf(e.Dir), bytesOf(e.Cwd)
	e.EnvBytes = nil
	copied := false
	for i, kv := range e.Env {
		if utf8.ValidString(kv) {
			continue
		}
		if !copied {
			e.Env, copied = append([]string(nil), e.Env...), true
			e.EnvBytes = map[int][]byte{}
		}
		e.EnvBytes[i], e.Env[i] = []byte(kv), ""
	}
	return e.HasBytes()
}

// HasBytes reports whether e has a _bytes field set.
func (e *Exec) HasBytes() bool {
	return e.CommandBytes != nil || e.DirBytes != nil || e.CwdBytes != nil || e.EnvBytes != nil
}

// DecodeBytes puts each _bytes field of a received Exec in place of its
// text (and clears it). An env_bytes index outside env is an error of kind
// bad_request.
func (e *Exec) DecodeBytes() *Error {
	e.Command, e.CommandBytes = textOf(e.Command, e.CommandBytes), nil
	e.Dir, e.DirBytes = textOf(e.Dir, e.DirBytes), nil
	e.Cwd, e.CwdBytes = textOf(e.Cwd, e.CwdBytes), nil
	for i, b := range e.EnvBytes {
		if i < 0 || i >= len(e.Env) {
			return &Error{Kind: KindBadRequest, Message: fmt.Sprintf("env_bytes names entry %d, and env has %d entries (env_bytes[i] replaces env[i], which is then \"\")", i, len(e.Env))}
		}
		e.Env[i] = string(b)
	}
	e.EnvBytes = nil
	return nil
}

// SetCwd sets r's cwd (and cwd_bytes when it is not UTF-8).
func (r *Result) SetCwd(cwd string) { r.Cwd, r.CwdBytes = cwd, bytesOf(cwd) }

// CwdText is the session's cwd after the command, exactly.
func (r *Result) CwdText() string { return textOf(r.Cwd, r.CwdBytes) }

// SetCwd sets s's cwd (and cwd_bytes when it is not UTF-8).
func (s *Session) SetCwd(cwd string) { s.Cwd, s.CwdBytes = cwd, bytesOf(cwd) }

// CwdText is the session's cwd, exactly.
func (s *Session) CwdText() string { return textOf(s.Cwd, s.CwdBytes) }
