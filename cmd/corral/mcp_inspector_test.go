//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-dev/corral/internal/mcpserver"
)

// inspectorVersion is the @modelcontextprotocol/inspector the tests run.
// It declares Node >= 22.7.5 but its CLI runs on the Node 20 these
// machines have (npm warns EBADENGINE); 0.15.0, the last without that
// declaration, has no --header, so it cannot send the Bearer token.
const inspectorVersion = "0.16.8"

// inspector returns the official MCP inspector's executable, installed
// once into the user's cache directory (or $CORRAL_MCP_INSPECTOR), or
// skips the test saying why it cannot.
func inspector(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CORRAL_MCP_INSPECTOR"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no cache directory for the MCP inspector: %v", err)
	}
	dir := filepath.Join(cache, "corral-test", "inspector-"+inspectorVersion)
	bin := filepath.Join(dir, "node_modules", ".bin", "mcp-inspector")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed: cannot install the MCP inspector")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: cannot run the MCP inspector")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Skip(err)
	}
	out, err := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir,
		"@modelcontextprotocol/inspector@"+inspectorVersion).CombinedOutput()
	if err != nil {
		t.Skipf("npm install @modelcontextprotocol/inspector@%s failed (no registry?): %v\n%s", inspectorVersion, err, out)
	}
	return bin
}

// inspect runs the inspector's CLI against "corral mcp" and decodes its
// JSON answer.
func inspect(t *testing.T, bin string, e *daemonEnv, args ...string) map[string]any {
	t.Helper()
	return inspectTarget(t, bin, e, []string{corralBin, "mcp"}, args...)
}

// inspectTarget runs the inspector's CLI against target (a command, or a
// URL and its transport flags).
func inspectTarget(t *testing.T, bin string, e *daemonEnv, target []string, args ...string) map[string]any {
	t.Helper()
	c := cli(t, e.mark, e.state)
	c.Path = bin
	c.Args = append(append([]string{bin, "--cli"}, target...), args...)
	c.Dir = t.TempDir()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("inspector %v: %v\n%s\n%s", args, err, out.String(), errb.String())
		}
	case <-time.After(60 * time.Second):
		c.Process.Kill()
		<-done
		t.Fatalf("inspector %v: no answer in 60s", args)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("inspector %v: %v: %s", args, err, out.String())
	}
	return m
}

func TestMCPInspectorHTTP(t *testing.T) {
	bin := inspector(t)
	e := newDaemonEnv(t)
	url, token := mcpHTTP(t, e)
	target := []string{url, "--transport", "http", "--header", "Authorization: Bearer " + token}
	r := inspectTarget(t, bin, e, target, "--method", "tools/call", "--tool-name", "exec",
		"--tool-arg", "command=echo over-http", "--tool-arg", "session=web")
	b, _ := json.Marshal(r["structuredContent"])
	var o mcpserver.ExecOutput
	json.Unmarshal(b, &o)
	if r["isError"] == true || o.Status != "done" || o.Output != "over-http\n" || o.Session != "web" {
		t.Errorf("exec over http through the inspector: %s", b)
	}
	// Without the token the inspector cannot connect.
	c := cli(t, e.mark, e.state)
	c.Path = bin
	c.Args = []string{bin, "--cli", url, "--transport", "http", "--method", "tools/list"}
	out, err := c.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Bearer token is required") {
		t.Errorf("inspector without the token: %v %s", err, out)
	}
}

func TestMCPInspectorStdio(t *testing.T) {
	bin := inspector(t)
	e := newDaemonEnv(t)
	list := inspect(t, bin, e, "--method", "tools/list")
	var names []string
	for _, tool := range list["tools"].([]any) {
		tm := tool.(map[string]any)
		if tm["inputSchema"] == nil || tm["outputSchema"] == nil {
			t.Errorf("tool %v lacks a schema", tm["name"])
		}
		names = append(names, tm["name"].(string))
	}
	if got := strings.Join(names, " "); got != "exec exec_cancel exec_wait kill_session sessions term_open term_screen term_send term_wait" {
		t.Errorf("tools/list: %s", got)
	}
	// The terminal tools, with every argument as the inspector sends it.
	r0 := inspect(t, bin, e, "--method", "tools/call", "--tool-name", "term_open", "--tool-arg", "name=insp-term",
		"--tool-arg", `command=["sh","-c","echo from-inspector-term; exec sleep 600"]`, "--tool-arg", "size=70x20")
	if r0["isError"] == true {
		t.Fatalf("term_open from the inspector: %v", r0)
	}
	r0 = inspect(t, bin, e, "--method", "tools/call", "--tool-name", "term_wait", "--tool-arg", "name=insp-term",
		"--tool-arg", "text=from-inspector-term", "--tool-arg", "timeout_ms=10000")
	if sc, _ := r0["structuredContent"].(map[string]any); r0["isError"] == true || sc["reason"] != "text" {
		t.Errorf("term_wait from the inspector: %v", r0)
	}
	r := inspect(t, bin, e, "--method", "tools/call", "--tool-name", "exec",
		"--tool-arg", "command=cd /tmp && echo from-inspector", "--tool-arg", "session=insp", "--tool-arg", "timeout_ms=10000")
	b, _ := json.Marshal(r["structuredContent"])
	var o mcpserver.ExecOutput
	json.Unmarshal(b, &o)
	if r["isError"] == true || o.Status != "done" || o.Output != "from-inspector\n" || o.Session != "insp" || o.Cwd != "/tmp" {
		t.Errorf("exec through the inspector: %s", b)
	}
	content := r["content"].([]any)[0].(map[string]any)["text"].(string)
	if !strings.Contains(content, "from-inspector") {
		t.Errorf("text content: %q", content)
	}
	// The session is the daemon's: a second server sees it.
	r = inspect(t, bin, e, "--method", "tools/call", "--tool-name", "sessions")
	if b, _ := json.Marshal(r["structuredContent"]); !strings.Contains(string(b), `"name":"insp"`) {
		t.Errorf("sessions through the inspector: %s", b)
	}
	// A bad input is a tool error, not a failure of the call.
	r = inspect(t, bin, e, "--method", "tools/call", "--tool-name", "exec", "--tool-arg", "command=true", "--tool-arg", "timeout_ms=-5")
	if r["isError"] != true {
		t.Errorf("negative timeout through the inspector: %v", r)
	}
}

// TestMCPInspectorHTTPGone: the official inspector, a client no one here
// wrote, calls exec over streamable HTTP and is killed while the command
// runs: the call's answer can never be delivered, so its tree is stopped.
func TestMCPInspectorHTTPGone(t *testing.T) {
	bin := inspector(t)
	e := newDaemonEnv(t)
	url, token := mcpHTTP(t, e)
	pidFile := filepath.Join(t.TempDir(), "pids")
	c := cli(t, e.mark, e.state)
	c.Path = bin
	c.Args = []string{bin, "--cli", url, "--transport", "http", "--header", "Authorization: Bearer " + token,
		"--method", "tools/call", "--tool-name", "exec", "--tool-arg", "session=gone",
		"--tool-arg", "command=for i in 1 2 3 4 5; do sleep 300 & echo $! >> " + pidFile + "; done; echo ready >> " + pidFile + ".ready; wait"}
	// The inspector's node may start another node: its own group, killed
	// as a group (ours) below.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(pidFile + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-waited
			t.Fatal("the inspector's command did not start in 60 s")
		}
	}
	b, _ := os.ReadFile(pidFile)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
	}
	killed := time.Now()
	syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	<-waited
	if !waitAllGone(pids, 10*time.Second) {
		t.Fatalf("the inspector was killed; its command's tree %v runs on after 10 s", pids)
	}
	t.Logf("inspector killed -> tree gone in %v", time.Since(killed).Round(time.Millisecond))
}
