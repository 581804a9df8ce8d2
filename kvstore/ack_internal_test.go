package kvstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-dev/sluice/protocol"
)

// serverAck is a pub ack as nats-server writes it: the success template of
// its fast path (stream.go: the pubAck prefix and the sequence), or the
// JSPubAckResponse marshalled on the others.
func serverAck(stream, domain string, seq uint64, duplicate bool, apiErr *server.ApiError, template bool) []byte {
	if template && apiErr == nil && !duplicate {
		var b []byte
		if domain != "" {
			b = fmt.Appendf(nil, "{%q:%q,%q:%q,%q:", "stream", stream, "domain", domain, "seq")
		} else {
			b = fmt.Appendf(nil, "{%q:%q,%q:", "stream", stream, "seq")
		}
		return append(strconv.AppendUint(b, seq, 10), '}')
	}
	resp := server.JSPubAckResponse{Error: apiErr, PubAck: &server.PubAck{Stream: stream, Sequence: seq, Domain: domain, Duplicate: duplicate}}
	if apiErr != nil {
		resp.PubAck = &server.PubAck{Stream: stream}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		panic(err)
	}
	return b
}

func TestParseAck(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		seq  uint64
		err  error // nil: ok
	}{
		{"template", serverAck("KV_sluice_claims", "", 42, false, nil, true), 42, nil},
		{"domain", serverAck("KV_c", "hub", 7, false, nil, true), 7, nil},
		{"marshalled", serverAck("KV_c", "", 1<<40, false, nil, false), 1 << 40, nil},
		{"duplicate", serverAck("KV_c", "", 9, true, nil, false), 9, nil},
		{"max", serverAck("KV_c", "", 1<<63, false, nil, true), 1 << 63, nil},
		{"wrong last sequence", serverAck("KV_c", "", 0, false, server.NewJSStreamWrongLastSequenceError(5), false), 0, ErrWrongLastSequence},
		{"full", serverAck("KV_c", "", 0, false, server.NewJSStreamStoreFailedError(errors.New("maximum messages exceeded")), false), 0, ErrFull},
		{"other error", serverAck("KV_c", "", 0, false, server.NewJSStreamMessageExceedsMaximumError(), false), 0, nil},
		{"no stream", []byte(`{"stream":"","seq":3}`), 0, errUnavailable},
		{"not json", []byte(`nope`), 0, errUnavailable},
		{"no seq", []byte(`{"stream":"KV_c"}`), 0, nil},
		{"empty", nil, 0, errUnavailable},
	}
	for _, c := range cases {
		seq, err := parseAck(c.data)
		switch {
		case c.name == "other error":
			if err == nil || errors.Is(err, errUnavailable) || errors.Is(err, ErrWrongLastSequence) {
				t.Errorf("%s: %d %v, want the server's error as is", c.name, seq, err)
			}
		case c.err == nil && (err != nil || seq != c.seq):
			t.Errorf("%s: %d %v, want %d", c.name, seq, err, c.seq)
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("%s: %d %v, want %v", c.name, seq, err, c.err)
		}
	}
}

// FuzzParseAck: for every ack the server can write, the lean parse says
// what a full JSON decode (jetstream.PublishMsg's) says.
func FuzzParseAck(f *testing.F) {
	f.Add("KV_sluice_claims", "", uint64(1), false, uint16(0), "", true)
	f.Add("KV_x", "hub", uint64(1<<62), true, uint16(0), "", false)
	f.Add("KV_x", "", uint64(0), false, uint16(10071), "wrong last sequence: 3", false)
	f.Fuzz(func(t *testing.T, stream, domain string, seq uint64, dup bool, code uint16, desc string, template bool) {
		if template && (!plainName(stream) || !plainName(domain)) {
			return // the server's names; its template quotes them as Go does
		}
		var apiErr *server.ApiError
		if code != 0 {
			apiErr = &server.ApiError{Code: 400, ErrCode: code, Description: desc}
		}
		data := serverAck(stream, domain, seq, dup, apiErr, template)
		got, err := parseAck(data)
		want, werr := parseAckSlow(data)
		if (err == nil) != (werr == nil) || got != want {
			t.Fatalf("%s: lean %d %v, full decode %d %v", data, got, err, want, werr)
		}
		if err != nil && werr.Error() != err.Error() {
			t.Fatalf("%s: lean %v, full decode %v", data, err, werr)
		}
	})
}

func TestParseAckID(t *testing.T) {
	const prefix = "_INBOX.abc."
	for _, id := range []uint64{1, 35, 36, 1 << 20, 1<<63 - 1} {
		got, ok := parseAckID(prefix+strconv.FormatUint(id, 36), len(prefix))
		if !ok || got != id {
			t.Errorf("id %d: %d %v", id, got, ok)
		}
	}
	for _, bad := range []string{prefix, prefix + "A1", prefix + "1.2", prefix + "zzzzzzzzzzzzzz", "_INB"} {
		if id, ok := parseAckID(bad, len(prefix)); ok {
			t.Errorf("%q: parsed as %d", bad, id)
		}
	}
}

func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !protocol.Plain(s[i]) {
			return false
		}
	}
	return true
}
