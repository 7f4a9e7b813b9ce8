package session

import (
	"strconv"
	"strings"
)

// parseExports turns the output of a shell's export -p into NAME=value
// entries. It reads the forms bash (declare -x NAME="v"), POSIX shells
// (export NAME='v'), zsh (export NAME=v, $'...') and ksh (typeset -x) print;
// names exported without a value are left out.
func parseExports(s string) []string {
	var env []string
	for _, stmt := range shellWords(s) {
		if len(stmt) == 0 {
			continue
		}
		switch stmt[0] {
		case "declare", "export", "typeset":
		default:
			continue
		}
		for _, w := range stmt[1:] {
			if strings.HasPrefix(w, "-") {
				continue
			}
			if name, _, ok := strings.Cut(w, "="); ok && validName(name) {
				env = append(env, w)
			}
		}
	}
	return env
}

func validName(n string) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// shellWords splits s into statements (at unquoted newlines and ';') of
// words, removing quotes: '...', "..." with backslash escapes, $'...' with C
// escapes, and backslash outside quotes.
func shellWords(s string) [][]string {
	var stmts [][]string
	var words []string
	var w strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	endStmt := func() {
		endWord()
		if len(words) > 0 {
			stmts = append(stmts, words)
			words = nil
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\n' || c == ';':
			endStmt()
		case c == ' ' || c == '\t':
			endWord()
		case c == '\\':
			inWord = true
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					w.WriteByte(s[i])
				}
			}
		case c == '\'':
			inWord = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '$' && i+1 < len(s) && s[i+1] == '\'':
			inWord = true
			i += 2
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] != '\\' || i+1 >= len(s) {
					w.WriteByte(s[i])
					continue
				}
				i++
				switch e := s[i]; e {
				case 'n':
					w.WriteByte('\n')
				case 't':
					w.WriteByte('\t')
				case 'r':
					w.WriteByte('\r')
				case 'e', 'E':
					w.WriteByte(0x1b)
				case 'a':
					w.WriteByte(7)
				case 'b':
					w.WriteByte(8)
				case 'f':
					w.WriteByte(12)
				case 'v':
					w.WriteByte(11)
				case 'x':
					n := 0
					for n < 2 && i+1+n < len(s) && isHex(s[i+1+n]) {
						n++
					}
					if v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 8); n > 0 && err == nil {
						w.WriteByte(byte(v))
						i += n
					} else {
						w.WriteString(`\x`)
					}
				case '0', '1', '2', '3', '4', '5', '6', '7':
					n := 1
					for n < 3 && i+n < len(s) && s[i+n] >= '0' && s[i+n] <= '7' {
						n++
					}
					v, _ := strconv.ParseUint(s[i:i+n], 8, 8)
					w.WriteByte(byte(v))
					i += n - 1
				default:
					w.WriteByte(e)
				}
			}
		case c == '"':
			inWord = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				w.WriteByte(s[i])
			}
		default:
			inWord = true
			w.WriteByte(c)
		}
	}
	endStmt()
	return stmts
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
