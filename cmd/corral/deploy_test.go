//go:build linux

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deployCommands reads the daemon's command line out of each file in
// deploy/: the systemd unit's ExecStart, the DaemonSet's command and args,
// the Nomad task's args.
func deployCommands(t *testing.T) map[string][]string {
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	out := map[string][]string{}

	unit := read("systemd/corral.service")
	m := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindStringSubmatch(unit)
	if m == nil || m[1] != "/usr/local/bin/corral" {
		t.Fatalf("corral.service: no ExecStart of /usr/local/bin/corral: %v", m)
	}
	out["systemd"] = strings.Fields(m[2])

	k8s := read("kubernetes/corral-daemonset.yaml")
	if !strings.Contains(k8s, `command: ["/usr/local/bin/corral", "daemon"]`) {
		t.Fatal("the DaemonSet's command is not corral daemon")
	}
	args := []string{"daemon"}
	for _, a := range regexp.MustCompile(`(?m)^\s+- (--\S+)$`).FindAllStringSubmatch(k8s, -1) {
		args = append(args, a[1])
	}
	out["kubernetes"] = args

	nomad := read("nomad/corral.nomad.hcl")
	block := regexp.MustCompile(`(?s)args = \[(.*?)\]`).FindStringSubmatch(nomad)
	if block == nil || !strings.Contains(nomad, `command = "/usr/local/bin/corral"`) {
		t.Fatal("the Nomad task runs no corral daemon")
	}
	args = nil
	for _, a := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(block[1], -1) {
		args = append(args, a[1])
	}
	out["nomad"] = args
	return out
}

// TestDeployFilesRunTheDaemon runs the daemon with the command line of each
// shipped deployment file (its health address moved to a free loopback
// port, as an engine would give it one), so that a renamed or misspelled
// flag breaks this test and not a fleet: each must start, log JSON, serve
// /readyz, and drain on SIGTERM.
func TestDeployFilesRunTheDaemon(t *testing.T) {
	for name, args := range deployCommands(t) {
		t.Run(name, func(t *testing.T) {
			if args[0] != "daemon" {
				t.Fatalf("%s runs corral %v, not corral daemon", name, args)
			}
			var run []string
			health := false
			for i := 0; i < len(args); i++ {
				a := args[i]
				switch {
				case a == "--health":
					run = append(run, a, "127.0.0.1:0")
					i++
					health = true
				case strings.HasPrefix(a, "--health="):
					run = append(run, "--health=127.0.0.1:0")
					health = true
				default:
					run = append(run, a)
				}
			}
			if !health || !strings.Contains(strings.Join(args, " "), "json") {
				t.Fatalf("%s: %v serves no health or logs no JSON", name, args)
			}
			t.Logf("%s: corral %s", name, strings.Join(run, " "))
			e := newDaemonEnv(t)
			d := startDaemonArgs(t, e, run)
			await(t, 20*time.Second, "never ready", func() bool {
				code, _ := d.get("/readyz")
				return code == 200
			})
			d.cmd.Process.Signal(syscall.SIGTERM) // ours: started here
			select {
			case <-d.exited:
			case <-time.After(20 * time.Second):
				t.Fatal("no exit within 20s of SIGTERM")
			}
			if d.err != nil || !d.logged("daemon stopping; no call under way") {
				t.Errorf("exit %v; log:\n%s", d.err, d.log())
			}
		})
	}
}
