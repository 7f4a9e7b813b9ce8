// Package corpus runs shell test suites that no one here wrote (the oils
// shell's spec tests, GNU bash's own tests/) twice: each case directly, as
// `SHELL -c CODE`, and as one command of a fresh corral session of the same
// shell, and compares what came back (stdout, stderr and exit status, byte
// for byte). What differs is where a session is not the shell it claims to
// be; a case that ends directly but not through the session is a hang.
//
// The suites are fetched by .ci/corpus; this package only reads them.
package corpus

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A Case is one piece of shell code to run and compare.
type Case struct {
	Suite string // "oils" or "bash"
	File  string // the file it came from, relative to the suite's root
	Name  string // the case's title (oils) or the script's name (bash)
	Line  int    // where the case starts in File
	Code  string
	Dir   string // where it runs; "" for a fresh temporary directory
}

// ID names a case in a report.
func (c Case) ID() string { return fmt.Sprintf("%s:%s:%d", c.Suite, c.File, c.Line) }

// OilsFile parses one oils spec file (spec/NAME.test.sh): cases begin at a
// "#### title" line and their code runs to the first "## " line of
// expectations. shells is the file's "## compare_shells:" list, which says
// which shells the case is meant to agree across.
func OilsFile(root, rel string) (cases []Case, shells []string, err error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *Case
	inCode := false
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#### "):
			if cur != nil {
				cases = append(cases, *cur)
			}
			cur = &Case{Suite: "oils", File: rel, Name: strings.TrimPrefix(line, "#### "), Line: n}
			inCode = true
		case strings.HasPrefix(line, "## compare_shells:"):
			shells = strings.Fields(strings.TrimPrefix(line, "## compare_shells:"))
		case strings.HasPrefix(line, "## "):
			inCode = false
		case cur != nil && inCode:
			cur.Code += line + "\n"
		}
	}
	if cur != nil {
		cases = append(cases, *cur)
	}
	return cases, shells, sc.Err()
}

// Oils lists the cases of every spec file under root (the oils tree's
// spec/ directory's parent) whose compare_shells names shell ("bash" also
// matches "bash-4.4"), in file order.
func Oils(root, shell string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(root, "spec", "*.test.sh"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var all []Case
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		cases, shells, err := OilsFile(root, rel)
		if err != nil {
			return nil, err
		}
		if !names(shells, shell) {
			continue
		}
		all = append(all, cases...)
	}
	return all, nil
}

func names(shells []string, shell string) bool {
	for _, s := range shells {
		if s == shell || strings.HasPrefix(s, shell+"-") {
			return true
		}
	}
	return false
}

var runLine = regexp.MustCompile(`\$\{THIS_SH\} \./([A-Za-z0-9_.-]+\.tests)`)

// Bash lists GNU bash's test scripts: for each tests/run-NAME, the
// NAME.tests script it runs, as one case whose code is the whole script,
// run in the tests directory (the scripts read their helpers from there).
func Bash(testsDir string) ([]Case, error) {
	runs, err := filepath.Glob(filepath.Join(testsDir, "run-*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(runs)
	var all []Case
	for _, r := range runs {
		b, err := os.ReadFile(r)
		if err != nil {
			return nil, err
		}
		m := runLine.FindSubmatch(b)
		if m == nil {
			continue // run-all, run-minimal: drivers, not tests
		}
		code, err := os.ReadFile(filepath.Join(testsDir, string(m[1])))
		if err != nil {
			return nil, err
		}
		all = append(all, Case{Suite: "bash", File: string(m[1]), Name: filepath.Base(r), Line: 1, Code: string(code), Dir: testsDir})
	}
	return all, nil
}

// Outcome is what one run of a case gave.
type Outcome struct {
	Stdout, Stderr []byte
	Status         int
	TimedOut       bool
	Err            string // corral or the harness failed (not the case)
}

// Verdict compares a case's direct run with its run through a session.
type Verdict string

const (
	Same        Verdict = "same"
	StdoutDiff  Verdict = "stdout"  // stdout differs (stderr and status may too)
	StatusDiff  Verdict = "status"  // stdout equal, exit status differs
	StderrDiff  Verdict = "stderr"  // only stderr differs
	Hang        Verdict = "hang"    // ended directly, not through the session
	BothTimeout Verdict = "timeout" // did not end either way: not counted
	HarnessErr  Verdict = "error"   // corral failed to run it
)

// Compare gives the verdict for one case.
func Compare(direct, via Outcome) Verdict {
	switch {
	case via.Err != "":
		return HarnessErr
	case direct.TimedOut && via.TimedOut:
		return BothTimeout
	case via.TimedOut:
		return Hang
	case !bytes.Equal(direct.Stdout, via.Stdout):
		return StdoutDiff
	case direct.Status != via.Status:
		return StatusDiff
	case !bytes.Equal(direct.Stderr, via.Stderr):
		return StderrDiff
	}
	return Same
}
