package owner

import (
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/sluice-dev/sluice/protocol"
)

// The owner's side of the owner protocol (quota's wire.go): replies, error
// replies, and the counts bucket's value format.

// errorMsg builds an error reply with the micro error headers.
func errorMsg(code int, reason string) *nats.Msg {
	m := &nats.Msg{Header: nats.Header{}}
	m.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(code))
	m.Header.Set(micro.ErrorHeader, reason)
	return m
}

func respondJSON(m *nats.Msg, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		_ = m.RespondMsg(errorMsg(503, "encode reply: "+err.Error()))
		return
	}
	_ = m.Respond(data)
}

func respondError(m *nats.Msg, code int, reason string) {
	if m.Reply == "" {
		return
	}
	_ = m.RespondMsg(errorMsg(code, reason))
}

func itoa(n int) string { return strconv.Itoa(n) }

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func parseInt64(b []byte) (int64, error) { return strconv.ParseInt(string(b), 10, 64) }

// counterValue is a counter's stored value with named slots: the
// anonymous count and each named slot's expiry (Unix ms). Without named
// slots a counter is stored as its plain decimal count.
type counterValue struct {
	N     int64            `json:"n"`
	Slots map[string]int64 `json:"s,omitempty"`
}

func encodeCounter(n int64, slots map[string]int64) []byte {
	if len(slots) == 0 {
		return []byte(itoa64(n))
	}
	b, _ := json.Marshal(counterValue{N: n, Slots: slots})
	return b
}

// decodeCounter reads a stored counter; ok is false for a value no owner
// writes (it is then treated as empty and overwritten by CAS).
func decodeCounter(b []byte) (n int64, slots map[string]int64, ok bool) {
	if n, err := parseInt64(b); err == nil {
		return n, nil, n >= 0
	}
	var v counterValue
	if json.Unmarshal(b, &v) != nil || v.N < 0 || len(v.Slots) > protocol.MaxNamedSlots {
		return 0, nil, false
	}
	return v.N, v.Slots, true
}
