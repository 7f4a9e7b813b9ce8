//go:build !unix

package session

import (
	"context"
	"errors"
	"testing"
)

func TestSessionsUnsupported(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("New: %v, want ErrUnsupported", err)
	}
	s := &Session{cfg: Config{Shell: "sh"}}
	if _, err := s.Exec(context.Background(), "true", Options{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Exec: %v, want ErrUnsupported", err)
	}
}
