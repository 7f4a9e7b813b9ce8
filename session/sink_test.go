package session

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// feedAll feeds stream 0 of a sink with data split at the given cut
// points, and stream 1 with a whole marker.
func feedAll(k *sink, data []byte, cuts []byte) {
	at := time.Now()
	for len(data) > 0 {
		n := len(data)
		if len(cuts) > 0 {
			n = min(int(cuts[0])%17+1, len(data))
			cuts = cuts[1:]
		}
		k.feed(0, data[:n], at)
		data = data[n:]
	}
}

// FuzzSinkFeed: whatever the command printed (any bytes, markers of other
// nonces, prefixes of this one) and however the reads split it, the
// caller gets exactly the output and the status parses.
func FuzzSinkFeed(f *testing.F) {
	f.Add([]byte("hello\n"), []byte{3, 1, 4})
	f.Add([]byte(""), []byte{})
	f.Add([]byte("\x1fcorral:AAAAAAAAAAAA 0 hB /tmp\x00"), []byte{1, 1, 1, 1, 2})
	f.Add([]byte("\x1fcorral:nonce12char"), []byte{5})
	f.Add([]byte("\x1fcorral:nonce12chaX \x1f\x1f\x00"), []byte{0, 0, 0})
	f.Add(bytes.Repeat([]byte{0x1f}, 40), []byte{2, 7})
	f.Fuzz(func(t *testing.T, out []byte, cuts []byte) {
		const nonce = "nonce12chars"
		var got bytes.Buffer
		k := newSink(nonce, time.Now(), Options{Stdout: &got}, false)
		marker := "\x1fcorral:" + nonce + " 7 hB /some dir\x00trailing junk"
		if bytes.Contains(out, []byte("\x1fcorral:"+nonce+" ")) {
			t.Skip("the output contains this command's own nonce")
		}
		feedAll(k, append(append([]byte(nil), out...), marker...), cuts)
		select {
		case <-k.found[0]:
		default:
			t.Fatalf("marker not found after %q", out)
		}
		k.close()
		if !bytes.Equal(got.Bytes(), out) {
			t.Fatalf("output %q, want %q", got.Bytes(), out)
		}
		if rc := k.exitCode(); rc != 7 {
			t.Fatalf("exit code %d", rc)
		}
		if cwd, _, ok := k.shellState(); !ok || cwd != "/some dir" {
			t.Fatalf("cwd %q %v", cwd, ok)
		}
	})
}

func FuzzParseExports(f *testing.F) {
	f.Add(`declare -x A="1"` + "\n" + `export B='x'"'"'y'`)
	f.Add(`export D=$'\x41\101\n'`)
	f.Add(`export E="unterminated`)
	f.Fuzz(func(t *testing.T, s string) {
		for _, kv := range parseExports(s) {
			name, _, ok := strings.Cut(kv, "=")
			if !ok || !validName(name) {
				t.Fatalf("bad entry %q from %q", kv, s)
			}
		}
	})
}
