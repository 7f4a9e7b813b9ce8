package main

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "10MiB": 10 << 20, "10M": 10 << 20, "10MB": 10e6,
		"1.5KiB": 1536, "2g": 2 << 30, "3 kb": 3000, "7B": 7,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "10XB", "-1", "1.5", "1e3", "99999999999TiB"} {
		if got, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, got)
		}
	}
}
