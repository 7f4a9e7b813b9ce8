package main

import (
	"os"
	"strings"

	"github.com/corral-dev/corral/internal/daemon"
)

// execCode returns the shell code corral exec sends, from exactly one of
// -c CODE, -f FILE or the words after the flags. One word is shell code
// as it stands (as bash -c takes it, and as corral exec always took it:
// 'cd src && make' keeps working). Several words are a command and its
// arguments: each is quoted for the shell, so that it reaches the command
// as given (ssh joins them with spaces and lets the far shell split them
// again, which turns "my file" into two arguments and '[%s]\n' into
// '[%s]n').
func execCode(f *execFlags, words []string) (string, error) {
	given := 0
	for _, b := range []bool{f.codeSet, f.file != "", len(words) > 0} {
		if b {
			given++
		}
	}
	switch {
	case given == 0:
		return "", usageErr("exec: give the command: -- COMMAND [ARGS...], -c CODE or -f FILE")
	case given > 1:
		return "", usageErr("exec: give one of -- COMMAND [ARGS...], -c CODE and -f FILE")
	case f.codeSet:
		return f.code, nil
	case f.file != "":
		fi, err := os.Stat(f.file)
		if err != nil {
			return "", usageErr("--file: %v", err)
		}
		if fi.Size() > daemon.MaxCommand {
			return "", usageErr("--file %s: %d bytes, more than a command may have (%d)", f.file, fi.Size(), daemon.MaxCommand)
		}
		b, err := os.ReadFile(f.file)
		if err != nil {
			return "", usageErr("--file: %v", err)
		}
		return string(b), nil
	case len(words) == 1:
		return words[0], nil
	}
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " "), nil
}

// shellQuote quotes w for any POSIX shell: as it is if it holds only
// characters no shell treats specially, else in single quotes, each single
// quote inside closing the quotes, escaped with a backslash, and reopening
// them.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./,:@%+") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}
