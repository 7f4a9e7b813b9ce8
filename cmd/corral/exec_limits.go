package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/corral-dev/corral"
)

// execLimitFlags are corral exec's resource limit flags, as given: each
// is a value, "max" (remove the limit from an existing session), or ""
// (not given).
type execLimitFlags struct {
	memory, memoryHigh, cpus, pids string
}

func (l *execLimitFlags) given() bool {
	return l.memory != "" || l.memoryHigh != "" || l.cpus != "" || l.pids != ""
}

// limits parses the flags: positive values set a limit, "max" is -1
// (remove it), a flag not given is 0 (leave it).
func (l *execLimitFlags) limits() (corral.Limits, error) {
	var out corral.Limits
	for _, s := range []struct {
		flag, v string
		to      *int64
	}{{"--memory", l.memory, &out.MemoryMax}, {"--memory-high", l.memoryHigh, &out.MemoryHigh}} {
		switch s.v {
		case "":
		case "max":
			*s.to = -1
		default:
			n, err := parseSize(s.v)
			if err != nil || n <= 0 {
				return out, usageErr("%s: want a positive size like 512MiB (or max: no limit), got %q", s.flag, s.v)
			}
			*s.to = n
		}
	}
	switch l.cpus {
	case "":
	case "max":
		out.CPUs = -1
	default:
		v, err := strconv.ParseFloat(l.cpus, 64)
		switch {
		case err != nil || v != v || v <= 0 || v > 1e6:
			return out, usageErr("--cpus: want a number of CPUs like 0.5 or 2 (or max: no limit), got %q", l.cpus)
		case v < 0.01:
			return out, usageErr("--cpus: the kernel's smallest quota is 0.01 CPUs")
		}
		out.CPUs = v
	}
	switch l.pids {
	case "":
	case "max":
		out.PidsMax = -1
	default:
		n, err := strconv.Atoi(l.pids)
		if err != nil || n <= 0 {
			return out, usageErr("--pids: want a positive number of processes (or max: no limit), got %q", l.pids)
		}
		out.PidsMax = n
	}
	return out, nil
}

// describeLimits is l as the cgroup files it sets, for people.
func describeLimits(l corral.Limits) string {
	var parts []string
	if l.MemoryMax > 0 {
		parts = append(parts, "memory.max "+humanBytes(l.MemoryMax))
	}
	if l.MemoryHigh > 0 {
		parts = append(parts, "memory.high "+humanBytes(l.MemoryHigh))
	}
	if l.CPUs > 0 {
		parts = append(parts, "cpus "+strconv.FormatFloat(l.CPUs, 'g', -1, 64))
	}
	if l.PidsMax > 0 {
		parts = append(parts, "pids.max "+strconv.Itoa(l.PidsMax))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// humanBytes is n in the largest binary unit that divides it, else bytes.
func humanBytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// sayLimitsChanged tells the user on stderr that the session's limits
// changed in place.
func sayLimitsChanged(w io.Writer, name string, l corral.Limits) {
	fmt.Fprintf(w, "corral: session %s: limits changed in place: %s\n", name, describeLimits(l))
}

// lsLimits is a session's limits and usage for ls --json.
func lsLimits(e map[string]any, l corral.Limits, mem, pids *int64, accounting string) {
	if !l.IsZero() {
		e["limits"] = l
	}
	if mem != nil {
		e["memory_bytes"] = *mem
	}
	if pids != nil {
		e["pids"] = *pids
	}
	if accounting != "" {
		e["accounting"] = accounting
	}
}
