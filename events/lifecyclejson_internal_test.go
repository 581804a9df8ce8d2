package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// appendLifecycleJSON writes what json.Marshal writes, for every field set or not,
// strings that need escaping or not, and times json.Marshal refuses.
func TestLifecycleAppendJSONIsMarshal(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 34, 17, 123456789, time.UTC)
	cases := []protocol.Lifecycle{
		{},
		{Tenant: "acme", Source: "gh", Key: "k-1", HookID: "h_1", At: at, Revision: 42},
		{Tenant: "a.b", Source: "s", Key: "ünïcode", HookID: "<h&>", At: at.In(time.FixedZone("x", 5*3600+1800))},
		{Tenant: "t", Kind: "bytes", RetryAfterMs: 17, Reason: "rate_limited", At: at.Truncate(time.Second)},
		{Tenant: "t", Key: "quote\" back\\ ctl\x01 tab\t del\x7f", HookID: "h", HubHookID: "hub-h", Revision: 1, At: at},
		{Tenant: "t", Key: "bad utf-8 \xff", HookID: "\u2028\u2029", RetryAfterMs: -5},
		{Tenant: "t&t", Source: "a>b", Key: "a<b", HookID: "é", Reason: "r&d", At: at},
	}
	for i, e := range cases {
		want, werr := json.Marshal(e)
		got, gerr := appendLifecycleJSON([]byte("prefix"), &e)
		if werr != nil || gerr != nil || !bytes.Equal(got[len("prefix"):], want) {
			t.Errorf("case %d:\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
		}
	}
	for _, at := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 25*3600)),
	} {
		e := protocol.Lifecycle{Tenant: "t", At: at}
		if _, err := json.Marshal(e); err == nil {
			t.Fatalf("json.Marshal took %v", at)
		}
		if _, err := appendLifecycleJSON(nil, &e); err == nil {
			t.Fatalf("appendLifecycleJSON took %v", at)
		}
	}
}

// FuzzLifecycleAppendJSON: any strings, numbers and instant.
//
//	go test -run '^$' -fuzz FuzzLifecycleAppendJSON -fuzztime 60s ./events/
func FuzzLifecycleAppendJSON(f *testing.F) {
	f.Add("acme", "gh", "k<1>", "h\"1", "hooks", int64(1764599657123456789), uint64(7), int64(3))
	f.Fuzz(func(t *testing.T, tenant, source, key, hook, kind string, nanos int64, rev uint64, retry int64) {
		e := protocol.Lifecycle{Tenant: tenant, Source: source, Key: key, HookID: hook, Kind: kind, Reason: kind, HubHookID: hook,
			At: time.Unix(0, nanos).UTC(), Revision: rev, RetryAfterMs: retry}
		want, werr := json.Marshal(e)
		got, gerr := appendLifecycleJSON(nil, &e)
		if (werr == nil) != (gerr == nil) || werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("got %s (%v), want %s (%v)", got, gerr, want, werr)
		}
	})
}
