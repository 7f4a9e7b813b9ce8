package session

import "sync"

// BackgroundMax bounds what a session keeps of its background output, on
// each of stdout and stderr: past it the oldest bytes go (and are counted
// in Background.Dropped).
const BackgroundMax = 256 << 10

// Background is what a session's background jobs wrote after the command
// that started them had ended (`(sleep 1; echo late) &`): it belongs to
// no command, so it is kept here, at most BackgroundMax bytes of each
// stream (the latest), until Session.TakeBackground takes it.
type Background struct {
	Stdout, Stderr []byte
	// Dropped counts the bytes written but no longer kept.
	Dropped int64
}

// background is a session's kept background output. It outlives the
// session's shells (a reset keeps what was written before it).
type background struct {
	mu      sync.Mutex
	kept    [2][]byte
	dropped int64
}

func (b *background) add(i int, p []byte) {
	if len(p) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := append(b.kept[i], p...)
	if over := len(k) - BackgroundMax; over > 0 {
		b.dropped += int64(over)
		k = append(k[:0:0], k[over:]...)
	}
	b.kept[i] = k
}

func (b *background) size() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(len(b.kept[0]) + len(b.kept[1]))
}

func (b *background) take() Background {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := Background{Stdout: b.kept[0], Stderr: b.kept[1], Dropped: b.dropped}
	b.kept, b.dropped = [2][]byte{}, 0
	return got
}

// TakeBackground returns what the session's background jobs wrote after
// their command ended (see Background) and forgets it. It never waits
// for a command.
func (s *Session) TakeBackground() Background {
	return s.cfg.bg.take()
}
