//go:build linux

package corpus

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/corral-dev/corral"
	"github.com/corral-dev/corral/internal/testproc"
	"github.com/corral-dev/corral/session"
)

// caseTimeout bounds one run of one case. A case that ends directly but
// not through the session within it is a hang.
const caseTimeout = 20 * time.Second

// TestCorpus runs the suites .ci/corpus fetched (CORRAL_CORPUS_OILS: a
// directory holding oils' spec/; CORRAL_CORPUS_BASH: bash's tests/),
// each case directly and through a fresh session, with bash and with dash
// (oils cases meant for dash), and writes a report of every difference to
// CORRAL_CORPUS_REPORT (default: a file in the test's temporary directory).
// It is a measurement: it fails only if the harness cannot run the cases
// (nothing ran, a direct run failed to start), and logs the figures.
func TestCorpus(t *testing.T) {
	oils, bashTests := os.Getenv("CORRAL_CORPUS_OILS"), os.Getenv("CORRAL_CORPUS_BASH")
	if oils == "" && bashTests == "" {
		t.Skip("no corpus: run .ci/corpus, which fetches the suites and sets CORRAL_CORPUS_OILS / CORRAL_CORPUS_BASH")
	}
	mark := testproc.Guard(t, 4*time.Hour)
	bin := shims(t)
	report := os.Getenv("CORRAL_CORPUS_REPORT")
	if report == "" {
		report = filepath.Join(t.TempDir(), "corpus-report.txt")
	}
	out, err := os.Create(report)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	type suite struct {
		name, shell string
		cases       []Case
	}
	var suites []suite
	for _, sh := range []string{"bash", "dash"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			t.Logf("%s not installed: its cases are skipped", sh)
			continue
		}
		if oils != "" {
			cs, err := Oils(oils, sh)
			if err != nil {
				t.Fatal(err)
			}
			suites = append(suites, suite{"oils/" + sh, path, limit(cs)})
		}
		if bashTests != "" && sh == "bash" {
			cs, err := Bash(bashTests)
			if err != nil {
				t.Fatal(err)
			}
			suites = append(suites, suite{"bash-tests/bash", path, limit(cs)})
		}
	}
	only := os.Getenv("CORRAL_CORPUS_ONLY") // a substring of a case ID
	for _, s := range suites {
		counts := map[Verdict]int{}
		ran := 0
		for _, c := range s.cases {
			if only != "" && !strings.Contains(c.ID(), only) {
				continue
			}
			ran++
			env := caseEnv(mark, bin, s.shell, oils)
			dir := c.Dir
			if dir == "" {
				dir = t.TempDir()
			}
			d := direct(s.shell, dir, env, c.Code)
			if d.Err != "" {
				t.Fatalf("%s: the direct run failed to start: %s", c.ID(), d.Err)
			}
			if c.Dir == "" {
				dir = t.TempDir() // a fresh directory, as the direct run had
			}
			v := viaSession(s.shell, dir, env, c.Code)
			verdict := Compare(d, v)
			counts[verdict]++
			if verdict != Same {
				fmt.Fprintf(out, "=== %s %s [%s] %s\n", s.name, c.ID(), verdict, c.Name)
				fmt.Fprintf(out, "--- code\n%s", clip(c.Code))
				fmt.Fprintf(out, "--- direct: status %d timedout=%v\nstdout: %q\nstderr: %q\n", d.Status, d.TimedOut, clip(string(d.Stdout)), clip(string(d.Stderr)))
				fmt.Fprintf(out, "--- session: status %d timedout=%v err=%s\nstdout: %q\nstderr: %q\n\n", v.Status, v.TimedOut, v.Err, clip(string(v.Stdout)), clip(string(v.Stderr)))
			}
		}
		if ran == 0 {
			continue
		}
		var parts []string
		for _, k := range []Verdict{Same, StdoutDiff, StatusDiff, StderrDiff, Hang, BothTimeout, HarnessErr} {
			parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
		}
		line := fmt.Sprintf("%s: %d cases: %s (%.1f%% identical)", s.name, ran, strings.Join(parts, ", "), 100*float64(counts[Same])/float64(ran))
		t.Log(line)
		fmt.Fprintln(out, "SUMMARY "+line)
	}
	t.Logf("report: %s", report)
}

// limit keeps the first CORRAL_CORPUS_LIMIT cases, for a quick look.
func limit(cs []Case) []Case {
	var n int
	if _, err := fmt.Sscan(os.Getenv("CORRAL_CORPUS_LIMIT"), &n); err == nil && n > 0 && n < len(cs) {
		return cs[:n]
	}
	return cs
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…\n"
	}
	return s
}

// shims makes a directory for PATH with what the oils cases call: its
// spec/bin helpers are python2 scripts, and python2 is often missing.
func shims(t *testing.T) string {
	dir := t.TempDir()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is needed by the oils spec helpers (argv.py, printenv.py)")
	}
	script := "#!/bin/sh\nexec " + py + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "python2"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// caseEnv is what both runs of a case see: the same small environment the
// oils runner gives its cases (PATH with the suite's helpers, SH, TMP set
// per case by the caller's directory), plus the test's marker.
func caseEnv(mark, shims, shell, oils string) []string {
	path := shims + ":/usr/local/bin:/usr/bin:/bin"
	env := []string{mark, "SH=" + shell, "THIS_SH=" + shell, "LC_ALL=C.UTF-8", "HOME=" + os.Getenv("HOME")}
	if oils != "" {
		path = filepath.Join(oils, "spec", "bin") + ":" + path
		env = append(env, "REPO_ROOT="+oils)
	}
	return append(env, "PATH="+path)
}

func withTmp(env []string, dir string) []string {
	return append(append([]string(nil), env...), "TMP="+dir, "BASH_TSTOUT="+filepath.Join(dir, "tstout"))
}

// direct runs SHELL -c CODE with stdin empty, contained so that what a
// case leaves behind is stopped. Its argv[0] is the shell's name, as when
// a user types bash -c CODE (so $0 and the name its messages start with
// are "bash", as a session's should be), not the path it was found at.
func direct(shell, dir string, env []string, code string) Outcome {
	var o, e bytes.Buffer
	cmd := corral.Command(shell, "-c", code)
	cmd.Args[0] = filepath.Base(shell)
	cmd.Dir, cmd.Env = dir, withTmp(env, dir)
	cmd.Stdin = strings.NewReader("")
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Timeout, cmd.Grace = caseTimeout, 100*time.Millisecond
	res, err := cmd.Run(context.Background())
	if res == nil || res.Outcome == corral.OutcomeStartFailed {
		return Outcome{Err: fmt.Sprint(err)}
	}
	return Outcome{Stdout: o.Bytes(), Stderr: e.Bytes(), Status: status(res), TimedOut: res.Outcome == corral.OutcomeTimeout}
}

// viaSession runs CODE as the first command of a fresh session of SHELL.
func viaSession(shell, dir string, env []string, code string) Outcome {
	s, err := session.New(session.Config{Shell: shell, Dir: dir, Env: withTmp(env, dir), Grace: 100 * time.Millisecond})
	if err != nil {
		return Outcome{Err: err.Error()}
	}
	defer s.Close()
	var o, e bytes.Buffer
	res, err := s.Exec(context.Background(), code, session.Options{
		Stdin: strings.NewReader(""), Stdout: &o, Stderr: &e, Timeout: caseTimeout,
	})
	if res == nil || res.Outcome == corral.OutcomeStartFailed {
		return Outcome{Err: fmt.Sprint(err)}
	}
	return Outcome{Stdout: o.Bytes(), Stderr: e.Bytes(), Status: status(res), TimedOut: res.Outcome == corral.OutcomeTimeout}
}

func status(r *corral.Result) int {
	if r.Outcome == corral.OutcomeSignaled {
		return 128 + r.Signal
	}
	return r.ExitCode
}

// TestParse checks the parsers against files written here, so that the
// figures the corpus run reports count what they claim to.
func TestParse(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "spec"), 0o755)
	spec := "## compare_shells: dash bash-4.4 mksh\n\n#### first\necho a\necho b\n## STDOUT:\na\nb\n## END\n\n#### second\n# a comment\nexit 3\n## status: 3\n"
	os.WriteFile(filepath.Join(root, "spec", "x.test.sh"), []byte(spec), 0o644)
	os.WriteFile(filepath.Join(root, "spec", "y.test.sh"), []byte("## compare_shells: zsh\n#### z\necho z\n"), 0o644)
	cs, err := Oils(root, "bash")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Code != "echo a\necho b\n" || cs[1].Code != "# a comment\nexit 3\n" || cs[1].Line != 11 || cs[0].Name != "first" {
		t.Fatalf("parsed %+v", cs)
	}
	if cs, _ := Oils(root, "dash"); len(cs) != 2 {
		t.Fatalf("dash cases: %d", len(cs))
	}
	if cs, _ := Oils(root, "zsh"); len(cs) != 1 {
		t.Fatalf("zsh cases: %d", len(cs))
	}

	tests := t.TempDir()
	os.WriteFile(filepath.Join(tests, "run-arith"), []byte("${THIS_SH} ./arith.tests > ${BASH_TSTOUT} 2>&1\ndiff ${BASH_TSTOUT} arith.right\n"), 0o644)
	os.WriteFile(filepath.Join(tests, "run-all"), []byte("for x in run-*; do sh $x; done\n"), 0o644)
	os.WriteFile(filepath.Join(tests, "arith.tests"), []byte("echo $((1+2))\n"), 0o644)
	bs, err := Bash(tests)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Code != "echo $((1+2))\n" || bs[0].Dir != tests {
		t.Fatalf("bash cases: %+v", bs)
	}
	var names []string
	for _, c := range append(cs, bs...) {
		names = append(names, c.ID())
	}
	sort.Strings(names)
	if names[0] != "bash:arith.tests:1" {
		t.Fatalf("ids: %v", names)
	}

	same := Outcome{Stdout: []byte("a"), Status: 0}
	for _, tc := range []struct {
		d, v Outcome
		want Verdict
	}{
		{same, same, Same},
		{same, Outcome{Stdout: []byte("b")}, StdoutDiff},
		{same, Outcome{Stdout: []byte("a"), Status: 1}, StatusDiff},
		{same, Outcome{Stdout: []byte("a"), Stderr: []byte("x")}, StderrDiff},
		{same, Outcome{TimedOut: true}, Hang},
		{Outcome{TimedOut: true}, Outcome{TimedOut: true}, BothTimeout},
		{same, Outcome{Err: "x"}, HarnessErr},
	} {
		if got := Compare(tc.d, tc.v); got != tc.want {
			t.Errorf("Compare(%+v, %+v) = %s, want %s", tc.d, tc.v, got, tc.want)
		}
	}
}
