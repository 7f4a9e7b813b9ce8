//go:build !linux

package contain

func setLimits(dir string, l Limits) error { return ErrUnsupported }

func checkControllers(iso Isolation, l Limits) error { return nil }

func liveUsage(dir string) (Usage, error) {
	return Usage{Missing: "no cgroup on this system"}, ErrUnsupported
}

func counters(dir string, peaks bool) (Usage, error) {
	return Usage{Missing: "no cgroup on this system"}, ErrUnsupported
}

func resetPeak(dir string) (*Peak, error) { return nil, ErrUnsupported }

// Read is the tree's memory peak since the reset, in bytes.
func (p *Peak) Read() (int64, error) { return 0, ErrUnsupported }

// Close releases the Peak.
func (p *Peak) Close() {}
