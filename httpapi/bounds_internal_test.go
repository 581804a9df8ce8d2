package httpapi

import (
	"testing"

	"github.com/sluice-dev/sluice/hooks"
)

// TestBodyLimitFitsPayload: the body limit is the source's max_body_bytes,
// lowered so that body plus headers fit the connection's max payload (a
// larger body could never be stored: 413, not 503 forever).
func TestBodyLimitFitsPayload(t *testing.T) {
	payload := int64(1 << 20)
	h := &Handler{cfg: Config{MaxPayload: func() int64 { return payload }}}
	if got := h.bodyLimit(Source{MaxBodyBytes: 4 << 20}); got != payload-hooks.OverheadBytes {
		t.Fatalf("4 MiB source on a 1 MiB connection: limit %d", got)
	}
	if got := h.bodyLimit(Source{MaxBodyBytes: 1000}); got != 1000 {
		t.Fatalf("small source: limit %d", got)
	}
	payload = 512 << 10 // a reconnect to a server with a smaller max_payload
	if got := h.bodyLimit(Source{MaxBodyBytes: 1 << 20}); got != payload-hooks.OverheadBytes {
		t.Fatalf("after reconnect: limit %d", got)
	}
}
