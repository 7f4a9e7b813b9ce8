//go:build linux

package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/testproc"
)

// TestExecCarriesBytes: shell code, environment entries (names and
// values) and working directories are bytes, and corral exec carries them
// exactly. Before, a Latin-1 byte in any of them made every call fail
// (with gRPC: 125 "string field contains invalid UTF-8"; then a usage
// error refusing the call), even to an existing session.
//
// An environment name that is not a shell identifier is looked for in the
// shell's own environment (/proc/$$/environ): what corral gave it. dash
// and busybox ash do not pass such names on to the programs they start;
// bash does.
func TestExecCarriesBytes(t *testing.T) {
	e := newDaemonEnv(t)
	dir := filepath.Join(t.TempDir(), "caf\xe9")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	codeFile := filepath.Join(t.TempDir(), "code.sh")
	if err := os.WriteFile(codeFile, []byte("printf '%s\\n' '\xe9\xff'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, cwd string, args ...string) (string, string, int) {
		t.Helper()
		c := cli(t, e.mark, e.state, args...)
		c.Env = append(c.Env, env...)
		c.Dir = cwd
		return runCaptured(c)
	}
	for _, tc := range []struct {
		name string
		env  []string
		cwd  string
		args []string
		want string
	}{
		{"the command", nil, "", []string{"exec", "-s", "s", "--", "printf '\xe9\\n'"}, "\xe9\n"},
		{"words of a command", nil, "", []string{"exec", "-s", "s", "--", "printf", "[%s]", "caf\xe9", "\xff"}, "[caf\xe9][\xff]"},
		{"an environment value", []string{"BADV=a\xffb"}, "", []string{"exec", "-s", "v", "--", `printf %s "$BADV"`}, "a\xffb"},
		{"an environment name", []string{"N\xe9=v\xe9"}, "", []string{"exec", "-s", "n", "--", "tr '\\0' '\\n' < /proc/$$/environ | LC_ALL=C grep -a '^N\xe9='"}, "N\xe9=v\xe9\n"},
		{"the client's cwd", nil, dir, []string{"exec", "-s", "d", "--", "pwd"}, dir + "\n"},
		{"--cwd", nil, "", []string{"exec", "-s", "s", "--cwd", dir, "--", "pwd"}, dir + "\n"},
		{"--env", nil, "", []string{"exec", "--oneshot", "--env", "E\xe9=\xfe", "--", "tr '\\0' '\\n' < /proc/$$/environ | LC_ALL=C grep -a '^E\xe9='"}, "E\xe9=\xfe\n"},
		{"--file", nil, "", []string{"exec", "-s", "s", "-f", codeFile}, "\xe9\xff\n"},
		{"a oneshot", []string{"BADV=\xe9"}, dir, []string{"exec", "--oneshot", "--", "printf '%s \xe9 ' \"$BADV\"; pwd"}, "\xe9 \xe9 " + dir + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, rc := run(tc.env, tc.cwd, tc.args...)
			if rc != 0 || out != tc.want {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q", rc, out, errs, tc.want)
			}
		})
	}
	// --oneshot with a session name was silently run outside the session.
	if _, errs, rc := run(nil, "", "exec", "--oneshot", "-s", "s", "--", "true"); rc != 2 || !strings.Contains(errs, "takes no -s NAME") {
		t.Errorf("--oneshot -s: exit %d, stderr %q", rc, errs)
	}
	// A cwd that cannot be entered: the reason names it, exactly.
	resFile := filepath.Join(t.TempDir(), "r.json")
	_, errs, rc := run(nil, "", "exec", "-s", "s", "--result", resFile, "--cwd", dir+"/gone\xff", "--", "true")
	if rc != 125 || !strings.Contains(errs, dir+"/gone\xff") {
		t.Errorf("a missing cwd: exit %d, stderr %q", rc, errs)
	}
	var res struct {
		Error      string `json:"error"`
		ErrorBytes []byte `json:"error_bytes"`
	}
	if b, _ := os.ReadFile(resFile); json.Unmarshal(b, &res) != nil || !strings.Contains(string(res.ErrorBytes), dir+"/gone\xff") ||
		!strings.Contains(res.Error, "gone\ufffd") {
		t.Errorf("--result of a missing cwd: %s", b)
	}

	// ls shows such a cwd: as text, and in JSON as a string with U+FFFD
	// and cwd_bytes, the exact bytes (base64).
	out, errs, rc := run(nil, "", "ls", "--json")
	var list []struct {
		Name     string `json:"name"`
		Cwd      string `json:"cwd"`
		CwdBytes []byte `json:"cwd_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || rc != 0 {
		t.Fatalf("ls --json: %v %d %q %q", err, rc, out, errs)
	}
	seen := 0
	for _, s := range list {
		switch s.Name {
		case "d", "s":
			seen++
			if string(s.CwdBytes) != dir || s.Cwd != strings.ToValidUTF8(dir, "\ufffd") {
				t.Errorf("ls --json %s: cwd %q cwd_bytes %q, want %q", s.Name, s.Cwd, s.CwdBytes, dir)
			}
		case "v":
			seen++
			if s.CwdBytes != nil {
				t.Errorf("ls --json %s: cwd_bytes %q for a UTF-8 cwd", s.Name, s.CwdBytes)
			}
		}
	}
	if seen != 3 || !strings.Contains(out, `"cwd_bytes":"`+base64.StdEncoding.EncodeToString([]byte(dir))+`"`) {
		t.Errorf("ls --json: %s", out)
	}
	if out, _, _ := run(nil, "", "ls"); !strings.Contains(out, dir) {
		t.Errorf("ls: %q", out)
	}
}

// TestSessionBytesSurvive: a session whose cwd and exported environment
// are not UTF-8 keeps them across a take-over (the daemon SIGKILLed, the
// next one takes the live shell over) and across a reboot (the shell gone
// too: the next shell starts from the record). Before schema 4 the record
// held them replaced with U+FFFD: the session came back in / (the
// replaced cwd does not exist), its variables changed, and nothing said
// so.
func TestSessionBytesSurvive(t *testing.T) {
	e := newDaemonEnv(t)
	dir := filepath.Join(t.TempDir(), "d\xe9j\xe0")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, rc := e.exec("s", "cd '"+dir+"'; export LAT=caf\xe9 RAW=$(printf '\\377\\376'); L=local"); rc != 0 {
		t.Fatal("first command failed")
	}
	want := dir + "|caf\xe9|\xff\xfe\n"
	check := func(when string) {
		t.Helper()
		if out, rc := e.exec("s", `printf '%s|%s|%s\n' "$PWD" "$LAT" "$RAW"`); rc != 0 || out != want {
			t.Fatalf("%s: %q %d, want %q", when, out, rc, want)
		}
	}
	check("in the live shell")
	e.killDaemon()
	check("after a take-over")
	pid := e.ls()["s"].ShellPid
	e.run("daemon", "stop")
	syscall.Kill(pid, syscall.SIGKILL) // ours: recorded by our daemon
	if !waitGone(pid, 5*time.Second) {
		t.Fatal("the shell did not die")
	}
	check("after a reboot (the shell restarted from the record)")
	if out, _ := e.exec("s", `echo "${L:-unset}"`); out != "unset\n" {
		t.Fatalf("not a fresh shell: %q", out)
	}
}

// TestRunCarriesBytes: corral run passes words and environment that are
// not UTF-8 exactly (it never refused them), its record names the command
// exactly (argv_bytes: reap --json showed U+FFFD for a command that never
// ran so), and a --result whose error names such a path has error_bytes
// beside the replaced text.
func TestRunCarriesBytes(t *testing.T) {
	mark := testproc.Guard(t, 60*time.Second)
	state := t.TempDir()
	c := cli(t, mark, state, "run", "--", "sh", "-c", `printf '%s|%s\n' "$0" "$X"; sleep 60`, "caf\xe9")
	c.Env = append(c.Env, "X=\xff")
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 64)
	n, _ := out.Read(line)
	if got := string(line[:n]); got != "caf\xe9|\xff\n" {
		t.Errorf("the command saw %q", got)
	}
	c.Process.Kill() // corral itself: its record is left for reap
	c.Wait()
	b, err := cli(t, mark, state, "reap", "--json").Output()
	var rep struct {
		Trees []struct {
			Action string `json:"action"`
			Record struct {
				Argv      []string          `json:"argv"`
				ArgvBytes map[string][]byte `json:"argv_bytes"`
			} `json:"record"`
		} `json:"trees"`
	}
	if err != nil || json.Unmarshal(b, &rep) != nil || len(rep.Trees) != 1 || rep.Trees[0].Action != "killed" {
		t.Fatalf("reap: %v %s", err, b)
	}
	if r := rep.Trees[0].Record; len(r.Argv) != 4 || string(r.ArgvBytes["3"]) != "caf\xe9" || r.Argv[3] != "caf\ufffd" {
		t.Errorf("the record's argv %q, argv_bytes %q", r.Argv, r.ArgvBytes)
	}
	if left := testproc.Survivors(mark); len(left) > 0 {
		t.Fatalf("reap left %v", left)
	}
	res := filepath.Join(t.TempDir(), "r.json")
	runCaptured(cli(t, mark, state, "run", "--result", res, "--", "/nonexistent/\xe9"))
	b, _ = os.ReadFile(res)
	var r struct {
		Error      string `json:"error"`
		ErrorBytes []byte `json:"error_bytes"`
	}
	if json.Unmarshal(b, &r) != nil || !strings.Contains(string(r.ErrorBytes), "/nonexistent/\xe9") || !strings.Contains(r.Error, "/nonexistent/\ufffd") {
		t.Errorf("--result: %s", b)
	}
}
