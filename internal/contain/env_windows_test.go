package contain

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestWindowsEnv(t *testing.T) {
	root := "SYSTEMROOT=" + os.Getenv("SYSTEMROOT")
	for _, tc := range []struct{ in, want []string }{
		{[]string{"A=1", "a=2"}, []string{"a=2", root}},
		{[]string{"Path=x", "B=1", "PATH=y"}, []string{"B=1", "PATH=y", root}},
		{[]string{"=C:=C:\\x", "=D:=D:\\y", "=C:=C:\\z"}, []string{"=D:=D:\\y", "=C:=C:\\z", root}},
		{[]string{"SystemRoot=C:\\w", "odd", ""}, []string{"SystemRoot=C:\\w", "odd"}},
		{nil, []string{root}},
	} {
		got, err := windowsEnv(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("windowsEnv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := windowsEnv([]string{"A=x\x00y"}); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("an entry with NUL: %v", err)
	}
}
