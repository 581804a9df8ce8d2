package frame

import (
	"bytes"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
)

// appendItems encodes decoded items again as a request frame.
func appendItems(items []Item) []byte {
	b := AppendRequestHeader(nil, len(items))
	for i := range items {
		b = AppendItem(b, &items[i])
	}
	return b
}

func sampleRequest() []byte {
	b := AppendRequestHeader(nil, 4)
	b = AppendHitHead(b, 7, 250, "acme", 2)
	b = AppendCharge(b, "hooks", 1_000_000, 10_000_000)
	b = AppendCharge(b, "bytes", 10, 100)
	b = AppendNoClaim(b)
	b = AppendHitHead(b, 0, 0, "beta", 1)
	b = AppendCharge(b, "hooks", 1, 2)
	b = AppendClaim(b, "gh", "k-1", "h", 5, 30_000)
	b = AppendHitHead(b, MaxPartitions-1, 1, "γ", 0)
	b = AppendClaim(b, "s", "", "x", 0, 0)
	return AppendSettle(b, 3, 900, "beta", "gh", "k-1", "h", 77, 60_000)
}

func TestRequestRoundTrip(t *testing.T) {
	b := sampleRequest()
	items, err := DecodeRequest(b, nil)
	if err != nil || len(items) != 4 {
		t.Fatalf("decode: %v, %d items", err, len(items))
	}
	it := items[1]
	if it.N != 0 || string(it.Tenant) != "beta" || len(it.Charges) != 1 || !it.Claim ||
		string(it.Source) != "gh" || string(it.Key) != "k-1" || string(it.HookID) != "h" || it.TTLMs != 5 || it.PendingMs != 30_000 {
		t.Fatalf("item 1: %+v", it)
	}
	if c := items[0].Charges[1]; string(c.Kind) != "bytes" || c.Inc != 10 || c.Cap != 100 {
		t.Fatalf("item 0 charge 1: %+v", c)
	}
	if it := items[3]; it.Op != OpSettle || it.N != 3 || it.TimeoutMs != 900 || string(it.Tenant) != "beta" ||
		string(it.Source) != "gh" || string(it.Key) != "k-1" || string(it.HookID) != "h" ||
		it.Revision != 77 || it.TTLMs != 60_000 || it.Claim || len(it.Charges) != 0 {
		t.Fatalf("item 3 (settle): %+v", it)
	}
	if again := appendItems(items); !bytes.Equal(again, b) {
		t.Fatal("re-encoded frame differs")
	}
	// Decoding into the items' capacity again reuses it.
	if items2, err := DecodeRequest(b, items); err != nil || &items2[0] != &items[0] {
		t.Fatalf("reuse: %v", err)
	}
	// Bounds: a partition out of range, too many charges, trailing bytes.
	bad := [][]byte{
		AppendNoClaim(AppendHitHead(AppendRequestHeader(nil, 1), MaxPartitions, 0, "t", 0)),
		AppendHitHead(AppendRequestHeader(nil, 1), 0, 0, "t", protocol.MaxCharges+1),
		append(sampleRequest(), 0),
		append(AppendRequestHeader(nil, 1), 3),                                         // an op that does not exist
		AppendSettle(AppendRequestHeader(nil, 1), 0, 0, "t", "s", "k", "h", 1, 0)[:12], // a short settle
		AppendRequestHeader(nil, 0),
		AppendRequestHeader(nil, MaxItems+1),
	}
	for i, f := range bad {
		if items, err := DecodeRequest(f, nil); err != ErrMalformed || len(items) != 0 {
			t.Errorf("bad frame %d: %v, %d items", i, err, len(items))
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	as := []Answer{
		{Index: 1, Result: ResultOK, HookID: "h", Revision: 42, Limits: []Limit{{Remaining: 0, ResetMs: 3600_000}}},
		{Index: 0, Status: StatusInvalid, Reason: "no"},
		{Index: 2, Result: ResultRateLimited, RetryMs: 17, Limits: []Limit{{Remaining: 0, ResetMs: 5}, {Remaining: 3}}},
		{Index: 3, Status: StatusNotOwner, Reason: "not_owner"},
		{Index: 4, Status: StatusLost, Reason: "claims: lost"},
	}
	b := AppendReplyHeader(nil, true, "route", len(as))
	for i := range as {
		b = AppendAnswer(b, &as[i])
	}
	rf, err := DecodeReply(b)
	if err != nil || !rf.More || string(rf.Route) != "route" || rf.Count != len(as) {
		t.Fatalf("header: %+v %v", rf, err)
	}
	for i, want := range as {
		var a ReplyAnswer
		if err := rf.Next(&a); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if a.Index != want.Index || a.Status != want.Status || string(a.Reason) != want.Reason || a.Result != want.Result ||
			string(a.HookID) != want.HookID || a.RetryMs != want.RetryMs || a.Revision != want.Revision || a.NLimits != len(want.Limits) {
			t.Errorf("answer %d: %+v, want %+v", i, a, want)
		}
		for k := range a.NLimits {
			if a.Limits[k] != want.Limits[k] {
				t.Errorf("answer %d limit %d: %+v", i, k, a.Limits[k])
			}
		}
	}
	if !rf.Done() {
		t.Fatal("trailing bytes")
	}
}

// FuzzDecodeRequest: the decoder never panics, never reads past its
// input, keeps every bound, and what it accepts encodes back canonically.
//
//	go test -run '^$' -fuzz FuzzDecodeRequest -fuzztime 60s ./quota/internal/frame/
func FuzzDecodeRequest(f *testing.F) {
	f.Add(sampleRequest())
	f.Add([]byte{Magic, Version, 0})
	f.Add([]byte(`{"op":"hit"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := DecodeRequest(data, nil)
		if err != nil {
			if len(items) != 0 {
				t.Fatal("items with an error")
			}
			return
		}
		if len(items) == 0 || len(items) > MaxItems {
			t.Fatalf("%d items", len(items))
		}
		for i := range items {
			it := &items[i]
			if (it.Op != OpHit && it.Op != OpSettle) || it.N >= MaxPartitions || it.TimeoutMs < 0 || len(it.Charges) > protocol.MaxCharges {
				t.Fatalf("item %d out of bounds: %+v", i, it)
			}
		}
		again := appendItems(items)
		items2, err := DecodeRequest(again, nil)
		if err != nil || len(items2) != len(items) {
			t.Fatalf("re-encoded frame: %v", err)
		}
		if !bytes.Equal(appendItems(items2), again) {
			t.Fatal("encoding is not stable")
		}
	})
}

// FuzzDecodeReply: the reply decoder never panics and keeps its bounds.
//
//	go test -run '^$' -fuzz FuzzDecodeReply -fuzztime 60s ./quota/internal/frame/
func FuzzDecodeReply(f *testing.F) {
	b := AppendReplyHeader(nil, false, "r", 2)
	b = AppendAnswer(b, &Answer{Index: 0, Result: ResultOK, Limits: []Limit{{Remaining: 1, ResetMs: 2}}})
	b = AppendAnswer(b, &Answer{Index: 1, Status: StatusNotOwner, Reason: "not_owner"})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		rf, err := DecodeReply(data)
		if err != nil {
			return
		}
		var a ReplyAnswer
		for range rf.Count {
			if rf.Next(&a) != nil {
				return
			}
			if a.Index >= MaxItems || a.NLimits > protocol.MaxCharges || a.Status == StatusAnswered && (a.Result == 0 || a.Result > maxResult) {
				t.Fatalf("accepted %+v", a)
			}
		}
		_ = rf.Done()
	})
}

// A reply's flags: bit 0 is "more"; no other bit is set.
func TestReplyFlags(t *testing.T) {
	for _, more := range []bool{false, true} {
		b := AppendReplyHeader(nil, more, "", 0)
		if b[2] != map[bool]byte{false: 0, true: flagMore}[more] {
			t.Errorf("more=%v: flags %#x", more, b[2])
		}
		rf, err := DecodeReply(b)
		if err != nil || rf.More != more {
			t.Errorf("more=%v: %+v %v", more, rf, err)
		}
	}
}
