package holder

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	big := bytes.Repeat([]byte("x"), MaxFrame+10)
	if err := WriteFrame(&b, FrameOutput, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&b, FrameOutput, big); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&b, FrameAnswer, Answer{Reason: "idle"}); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&b)
	var got [][]byte
	var types []byte
	for {
		typ, p, err := ReadFrame(r, nil)
		if err != nil {
			break
		}
		types = append(types, typ)
		got = append(got, append([]byte(nil), p...))
	}
	// A payload past the bound goes out as two frames.
	if string(types) != "ooo"+"a" || string(got[0]) != "hello" || len(got[1]) != MaxFrame || len(got[2]) != 10 ||
		!strings.Contains(string(got[3]), `"reason":"idle"`) {
		t.Fatalf("frames %q, sizes %d %d %d, %s", types, len(got[0]), len(got[1]), len(got[2]), got[3])
	}

	// A header announcing more than the bound is refused before any
	// allocation.
	var hdr [5]byte
	hdr[0] = FrameInput
	binary.BigEndian.PutUint32(hdr[1:], MaxFrame+1)
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(hdr[:])), nil); err == nil || !strings.Contains(err.Error(), "bound") {
		t.Errorf("an oversized frame: %v", err)
	}
	// A frame cut off says so.
	binary.BigEndian.PutUint32(hdr[1:], 10)
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(append(hdr[:], "abc"...))), nil); err == nil || !strings.Contains(err.Error(), "cut off") {
		t.Errorf("a cut frame: %v", err)
	}
}
