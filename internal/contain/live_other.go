//go:build !linux

package contain

func setLimits(dir string, l Limits) error { return ErrUnsupported }

func checkControllers(iso Isolation, l Limits) error { return nil }

func liveUsage(dir string) (Usage, error) {
	return Usage{Missing: "no cgroup on this system"}, ErrUnsupported
}

func openCounter(dir string) (*Counter, Usage, error) {
	return nil, Usage{Missing: "no cgroup on this system"}, ErrUnsupported
}

// Read reads the counters.
func (c *Counter) Read(peaks bool) (Usage, error) { return Usage{}, ErrUnsupported }

// Close releases the Counter.
func (c *Counter) Close() {}

func resetPeak(dir string) (*Peak, error) { return nil, ErrUnsupported }

// Read is the tree's memory peak since the reset, in bytes.
func (p *Peak) Read() (int64, error) { return 0, ErrUnsupported }

// Close releases the Peak.
func (p *Peak) Close() {}
