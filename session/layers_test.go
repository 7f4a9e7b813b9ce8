package session

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestSessionIsBuiltOnTheRunLayer: session's shells are trees of the run
// layer (corral.Cmd.Start, Tree, Adopt, FindOrphan), so session itself
// imports no containment backend, on any platform; only the run layer
// talks to internal/contain. (Its tests may: they check processes.)
func TestSessionIsBuiltOnTheRunLayer(t *testing.T) {
	if runtime.GOOS == "windows" {
		// Under Wine the go tool found is a Linux program; the Linux run
		// lists the imports for every GOOS, windows included.
		t.Skip("imports are listed for every GOOS by the Linux run")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			t.Skipf("no go tool to list imports with: %v", err)
		}
	}
	for _, goos := range []string{"linux", "darwin", "freebsd", "windows"} {
		cmd := exec.Command(goTool, "list", "-f", "{{join .Imports \"\\n\"}}", ".")
		cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list (GOOS=%s): %v\n%s", goos, err, out)
		}
		imports := strings.Fields(string(out))
		if len(imports) == 0 {
			t.Fatalf("go list (GOOS=%s) listed no imports at all", goos)
		}
		for _, imp := range imports {
			if imp == "github.com/corral-dev/corral/internal/contain" || strings.HasPrefix(imp, "github.com/corral-dev/corral/internal/contain/") {
				t.Errorf("GOOS=%s: session imports %s; it must start, stop and adopt its shells through the run layer", goos, imp)
			}
		}
		if !contains(imports, "github.com/corral-dev/corral") {
			t.Errorf("GOOS=%s: session does not import the run layer at all: %v", goos, imports)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
