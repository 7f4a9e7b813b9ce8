package holder

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestAttackJSONAcrossFrames: a value longer than a frame, of any length
// (one that fills its frames exactly too), reads back whole, and the next
// frame after it is still read as itself.
func TestAttackJSONAcrossFrames(t *testing.T) {
	for _, n := range []int{0, 10, MaxFrame - 3, MaxFrame - 2, MaxFrame - 1, 2*MaxFrame - 2, 3*MaxFrame + 5} {
		var buf bytes.Buffer
		v := strings.Repeat("x", n)
		if err := WriteJSON(&buf, FrameAnswer, v); err != nil {
			t.Fatal(err)
		}
		WriteFrame(&buf, FrameOutput, []byte("after"))
		r := bufio.NewReader(&buf)
		typ, b, err := ReadJSON(r)
		var got string
		if err != nil || typ != FrameAnswer || json.Unmarshal(b, &got) != nil || got != v {
			t.Fatalf("a string of %d bytes: %q %d bytes %v", n, typ, len(b), err)
		}
		if typ, p, err := ReadFrame(r, nil); err != nil || typ != FrameOutput || string(p) != "after" {
			t.Fatalf("after a string of %d bytes: %q %q %v", n, typ, p, err)
		}
	}
}
