//go:build !linux

package vt

import "time"

// threadCPU is not measured off Linux; benchmarks then report no CPU figure.
func threadCPU() time.Duration { return 0 }
