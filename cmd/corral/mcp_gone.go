package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// cancelWhenGone stops the tools/call requests of a POST whose HTTP client
// went away before their answers were written.
//
// Over streamable HTTP a call's answer travels on the response of the POST
// that carried it. The go-sdk keeps a call running when that response's
// connection drops, so that a client could resume the stream from an event
// store; corral's server keeps no event store (a resumed stream could not
// be replayed), so such a call's answer can never reach anyone, and the
// command behind it would run on until its timeout while the agent that
// asked for it is gone. This wrapper notices the drop (the request's
// context ends while the handler still runs, which net/http does only when
// the connection closes) and hands the session an MCP
// notifications/cancelled for each call of that POST, as the client itself
// would have sent: the same path as a real cancellation, so the tree is
// stopped as for one. A call whose answer was already written ignores it.
func cancelWhenGone(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") == "" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxMCPBody+1))
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil || len(body) > maxMCPBody {
			// Too big or unreadable: the SDK answers it (413 or 400).
			next.ServeHTTP(w, r)
			return
		}
		ids := callIDs(body)
		next.ServeHTTP(w, r)
		if len(ids) == 0 || r.Context().Err() == nil {
			return
		}
		for _, id := range ids {
			cancelCall(next, r, id)
		}
	})
}

// maxMCPBody is the go-sdk's default bound on a request body; a longer one
// is passed on untouched for the SDK to refuse.
const maxMCPBody = 4 << 20

// callIDs returns the JSON-RPC ids of the tools/call requests in body (one
// message or a batch).
func callIDs(body []byte) []json.RawMessage {
	type msg struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	var batch []msg
	if err := json.Unmarshal(body, &batch); err != nil {
		var one msg
		if json.Unmarshal(body, &one) != nil {
			return nil
		}
		batch = []msg{one}
	}
	var ids []json.RawMessage
	for _, m := range batch {
		if m.Method == "tools/call" && len(m.ID) > 0 && string(m.ID) != "null" {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// cancelCall posts notifications/cancelled for id to the session of r.
func cancelCall(next http.Handler, r *http.Request, id json.RawMessage) {
	n, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"method":  "notifications/cancelled",
		"params":  map[string]any{"requestId": id, "reason": "the HTTP client went away before the answer was written"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL.String(), bytes.NewReader(n))
	if err != nil {
		return
	}
	req.URL, req.Host, req.RemoteAddr = r.URL, r.Host, r.RemoteAddr
	for _, h := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	next.ServeHTTP(discardResponse{http.Header{}}, req)
}

// discardResponse is a ResponseWriter whose answer nobody reads.
type discardResponse struct{ h http.Header }

func (d discardResponse) Header() http.Header         { return d.h }
func (d discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (d discardResponse) WriteHeader(int)             {}
