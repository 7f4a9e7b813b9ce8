package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseSize parses a byte count: a plain number, or a number with a unit
// (B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB). KB, MB, ... are powers of
// 1000; K, KiB, M, MiB, ... powers of 1024.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("invalid size %q: want a number with an optional unit, like 10MiB", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %v", s, err)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q", s, t[i:])
	}
	n := v * mult
	if n > math.MaxInt64 || n != math.Trunc(n) {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes that fits", s)
	}
	return int64(n), nil
}
