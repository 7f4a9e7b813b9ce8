package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// seconds is a duration flag that takes a bare number as seconds, as GNU
// timeout does ("10", "1.5"), as well as Go durations ("1m30s", "250ms").
type seconds struct{ d *time.Duration }

func durationFlag(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(seconds{p}, name, usage+" (seconds, or a duration like 250ms, 1m30s)")
}

func (s seconds) String() string {
	if s.d == nil {
		return "0s"
	}
	return s.d.String()
}

func (s seconds) Type() string { return "duration" }

func (s seconds) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	*s.d = d
	return nil
}

// parseSeconds reads "10" or "1.5" as seconds, anything else as a Go
// duration.
func parseSeconds(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil && !strings.ContainsAny(v, "xXpPnN") {
		if math.IsNaN(f) || math.Abs(f*float64(time.Second)) > math.MaxInt64 {
			return 0, fmt.Errorf("%q is out of range", v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want seconds (10, 1.5) or a duration (250ms, 1m30s), got %q", v)
	}
	return d, nil
}

// pidList writes pids as words: "23766", "23766 and 23770",
// "1, 2 and 3".
func pidList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	switch len(s) {
	case 0:
		return "none"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// pidColumn writes pids for a table column: "3291,3293", "-" for none.
func pidColumn(pids []int) string {
	if len(pids) == 0 {
		return "-"
	}
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
