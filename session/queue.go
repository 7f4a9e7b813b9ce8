package session

import (
	"context"
	"sync"
)

// queue hands out turns in the order they were asked for. A waiter whose
// context ends leaves the line without ever taking a turn.
type queue struct {
	// mu guards the fields that follow.
	mu      sync.Mutex
	held    bool
	waiters []chan struct{}
}

// acquire waits for the caller's turn; release gives it to the next waiter.
func (q *queue) acquire(ctx context.Context) (release func(), err error) {
	q.mu.Lock()
	if !q.held && len(q.waiters) == 0 {
		q.held = true
		q.mu.Unlock()
		return q.release, nil
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	q.mu.Unlock()
	select {
	case <-ch:
		return q.release, nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		for i, w := range q.waiters {
			if w == ch {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				return nil, ctx.Err()
			}
		}
		// The turn was handed to us just as ctx ended: pass it on.
		q.releaseLocked()
		return nil, ctx.Err()
	}
}

func (q *queue) release() {
	q.mu.Lock()
	q.releaseLocked()
	q.mu.Unlock()
}

func (q *queue) releaseLocked() {
	if len(q.waiters) == 0 {
		q.held = false
		return
	}
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	close(next) // held stays true: the turn passes straight on
}
