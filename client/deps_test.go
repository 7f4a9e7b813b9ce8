package client_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestClientDeps: a Go program that uses the client links neither the
// daemon (internal/daemon, its store's bbolt) nor the session layer, nor
// gRPC or protobuf.
func TestClientDeps(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-deps", "github.com/corral-dev/corral/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list gave %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		switch {
		case d == "go.etcd.io/bbolt", strings.HasPrefix(d, "go.etcd.io/bbolt/"),
			d == "github.com/corral-dev/corral/session",
			d == "github.com/corral-dev/corral/internal/daemon", strings.HasPrefix(d, "github.com/corral-dev/corral/internal/daemon/"),
			d == "github.com/corral-dev/corral/internal/store",
			strings.HasPrefix(d, "google.golang.org/grpc"), strings.HasPrefix(d, "google.golang.org/protobuf"):
			t.Errorf("the client depends on %s", d)
		}
	}
}
