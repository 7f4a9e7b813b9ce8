package output

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) { f.n++; return 0, errors.New("broken pipe") }

// TestMeterLimit: the limit cuts the output at exactly the limit, across
// both streams, and says so once.
func TestMeterLimit(t *testing.T) {
	var out, errb bytes.Buffer
	start := time.Now()
	m := New(start, 10, &out, &errb)
	if m.FirstOutput() != -1 {
		t.Fatal("first output before any")
	}
	at := start.Add(3 * time.Millisecond)
	if n, err := m.Deliver(0, []byte("123456"), at); n != 6 || err != nil {
		t.Fatalf("first delivery: %d %v", n, err)
	}
	select {
	case <-m.LimitHit():
		t.Fatal("limit hit at 6 of 10")
	default:
	}
	if n, _ := m.Deliver(1, []byte("abcdef"), at.Add(time.Millisecond)); n != 4 {
		t.Fatalf("over the limit: admitted %d, want 4", n)
	}
	if n, _ := m.Deliver(0, []byte("x"), at); n != 0 {
		t.Fatalf("past the limit: admitted %d", n)
	}
	select {
	case <-m.LimitHit():
	default:
		t.Fatal("limit not hit")
	}
	if out.String() != "123456" || errb.String() != "abcd" || m.Bytes(0) != 6 || m.Bytes(1) != 4 {
		t.Fatalf("delivered %q %q, counted %d %d", out.String(), errb.String(), m.Bytes(0), m.Bytes(1))
	}
	if m.FirstOutput() != 3*time.Millisecond {
		t.Fatalf("first output %v", m.FirstOutput())
	}
}

// TestMeterFailingWriter: a writer that fails gets nothing more, the
// bytes are still counted, the first error is kept, and the other
// stream's writer goes on.
func TestMeterFailingWriter(t *testing.T) {
	f := &failing{}
	var errb bytes.Buffer
	m := New(time.Now(), 0, f, &errb)
	if _, err := m.Deliver(0, []byte("a"), time.Now()); err == nil {
		t.Fatal("a failed write not reported")
	}
	if _, err := m.Deliver(0, []byte("b"), time.Now()); err != nil || f.n != 1 {
		t.Fatalf("wrote to a failed writer again: %d writes, %v", f.n, err)
	}
	m.Deliver(1, []byte("still"), time.Now())
	if m.WriteErr() == nil || m.Bytes(0) != 2 || errb.String() != "still" {
		t.Fatalf("err %v, counted %d, stderr %q", m.WriteErr(), m.Bytes(0), errb.String())
	}
}

// TestMeterConcurrent: two streams delivering at once into one writer
// never interleave within a write and never pass the limit together.
func TestMeterConcurrent(t *testing.T) {
	var out bytes.Buffer
	m := New(time.Now(), 5000, &out, &out)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				m.Deliver(i, []byte("xyz"), time.Now())
			}
		}()
	}
	wg.Wait()
	if got := m.Bytes(0) + m.Bytes(1); got != 5000 || out.Len() != 5000 {
		t.Fatalf("admitted %d, wrote %d; want the limit, 5000", got, out.Len())
	}
}
