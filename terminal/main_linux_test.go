//go:build linux

package terminal

import (
	"os"
	"testing"

	"github.com/corral-dev/corral/internal/holder"
)

// holderEnv makes the test binary the holder (as `corral holder` is in
// corral), and starterEnv a process that opens a session and waits to be
// killed (see TestHolderSurvivesStarterKill).
const (
	holderEnv  = "CORRAL_TERMINAL_TEST_HOLDER"
	starterEnv = "CORRAL_TERMINAL_TEST_STARTER"
	attachEnv  = "CORRAL_TERMINAL_TEST_ATTACH"
	clientEnv  = "CORRAL_TERMINAL_TEST_CLIENT"
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) == "1" {
		os.Exit(holder.Main(os.Stdin, os.Stdout, os.Stderr))
	}
	if dir := os.Getenv(starterEnv); dir != "" {
		os.Exit(starterMain(dir))
	}
	if dir := os.Getenv(attachEnv); dir != "" {
		os.Exit(attachMain(dir))
	}
	if dir := os.Getenv(clientEnv); dir != "" {
		os.Exit(clientMain(dir))
	}
	os.Exit(m.Run())
}
