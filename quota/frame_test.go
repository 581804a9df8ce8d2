package quota

import (
	"bytes"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/coalesce"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

func sampleFrames() [][]byte {
	reqs := []protocol.HitRequest{
		{Charges: []protocol.Charge{hooks("acme", 3), {Kind: protocol.KindBytes, Tenant: "acme", IncrementUs: 10, CapacityUs: 100}}},
		{Charges: []protocol.Charge{hooks("beta", 1)}, Claim: &protocol.ClaimRequest{Tenant: "beta", Source: "gh", Key: "k-1", HookID: "h", TTLMs: 5, PendingTTLMs: 30_000}},
		{Claim: &protocol.ClaimRequest{Tenant: "γ", Source: "s", Key: "", HookID: "x"}},
	}
	var out [][]byte
	for k := 1; k <= len(reqs); k++ {
		f := frame.AppendRequestHeader(nil, k)
		for i := range k {
			f = appendHitItem(f, Partition(reqs[i].Tenant(), 64), int64(100*i), &reqs[i])
		}
		out = append(out, f)
	}
	return out
}

func TestFrameRoundTrip(t *testing.T) {
	reqs := []protocol.HitRequest{
		{Charges: []protocol.Charge{hooks("acme", 3), {Kind: "custom", Tenant: "acme", IncrementUs: 10, CapacityUs: 100}}},
		{Charges: []protocol.Charge{hooks("beta", 1)}, Claim: &protocol.ClaimRequest{Tenant: "beta", Source: "gh", Key: "k-1", HookID: "h", TTLMs: 5, PendingTTLMs: 30_000}},
	}
	f := frame.AppendRequestHeader(nil, len(reqs))
	for i := range reqs {
		f = appendHitItem(f, 7+i, 250, &reqs[i])
	}
	items, err := frame.DecodeRequest(f, nil)
	if err != nil || len(items) != 2 {
		t.Fatalf("decode: %v %d", err, len(items))
	}
	for i, it := range items {
		if it.N != 7+i || it.TimeoutMs != 250 {
			t.Errorf("item %d: n %d timeout %d", i, it.N, it.TimeoutMs)
		}
		got := itemRequest(&it)
		if got.Tenant() != reqs[i].Tenant() || len(got.Charges) != len(reqs[i].Charges) {
			t.Fatalf("item %d: %+v", i, got)
		}
		for k := range got.Charges {
			if got.Charges[k] != reqs[i].Charges[k] {
				t.Errorf("item %d charge %d: %+v, want %+v", i, k, got.Charges[k], reqs[i].Charges[k])
			}
		}
		if (got.Claim == nil) != (reqs[i].Claim == nil) || got.Claim != nil && *got.Claim != *reqs[i].Claim {
			t.Errorf("item %d claim: %+v, want %+v", i, got.Claim, reqs[i].Claim)
		}
	}
	// Reply frames: quota/internal/frame TestReplyRoundTrip.
}

// FuzzDecodeRequestFrame: the owner's decoder never panics, never reads
// past its input, and what it accepts encodes back to the same bytes.
//
//	go test -run '^$' -fuzz FuzzDecodeRequestFrame -fuzztime 60s ./quota/
func FuzzDecodeRequestFrame(f *testing.F) {
	for _, s := range sampleFrames() {
		f.Add(s)
	}
	f.Add([]byte{frame.Magic, frame.Version, 0})
	f.Add([]byte(`{"op":"hit"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := frame.DecodeRequest(data, nil)
		if err != nil {
			if len(items) != 0 {
				t.Fatal("items with an error")
			}
			return
		}
		if len(items) == 0 || len(items) > frame.MaxItems {
			t.Fatalf("%d items", len(items))
		}
		again := frame.AppendRequestHeader(nil, len(items))
		for i := range items {
			it := &items[i]
			if it.N >= MaxPartitions || it.TimeoutMs < 0 || len(it.Charges) > protocol.MaxCharges {
				t.Fatalf("item %d out of bounds: %+v", i, it)
			}
			again = frame.AppendItem(again, it)
			// The frame's check and the JSON one agree and never panic.
			req := itemRequest(it)
			if fe, je := ValidateItem(it), req.Validate(); (fe == nil) != (je == nil) {
				t.Fatalf("item check says %v, HitRequest.Validate says %v: %+v", fe, je, req)
			}
			_ = Partition(it.Tenant, protocol.DefaultPartitions)
		}
		// Varints have more than one encoding; the canonical form must
		// decode to the same items.
		items2, err := frame.DecodeRequest(again, nil)
		if err != nil || len(items2) != len(items) {
			t.Fatalf("re-encoded frame: %v", err)
		}
		if again2 := frame.AppendRequestHeader(nil, len(items2)); !bytes.Equal(appendAll(again2, items2), again) {
			t.Fatal("encoding is not stable")
		}
	})
}

func appendAll(b []byte, items []frame.Item) []byte {
	for i := range items {
		b = frame.AppendItem(b, &items[i])
	}
	return b
}

// FuzzDecodeReplyFrame: the client's reply decoder never panics.
//
//	go test -run '^$' -fuzz FuzzDecodeReplyFrame -fuzztime 60s ./quota/
func FuzzDecodeReplyFrame(f *testing.F) {
	b := frame.AppendReplyHeader(nil, false, "r", 2)
	b = frame.AppendAnswer(b, &frame.Answer{Index: 0, Result: 1, Limits: []frame.Limit{{Remaining: 1, ResetMs: 2}}})
	b = frame.AppendAnswer(b, &frame.Answer{Index: 1, Status: frame.StatusNotOwner, Reason: "not_owner"})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		rf, err := frame.DecodeReply(data)
		if err != nil {
			return
		}
		var a frame.ReplyAnswer
		for range rf.Count {
			if rf.Next(&a) != nil {
				return
			}
			if a.NLimits > protocol.MaxCharges || a.Status == frame.StatusAnswered && (a.Result == 0 || int(a.Result) >= len(resultCodes)) {
				t.Fatalf("accepted %+v", a)
			}
			ans := coalesce.AnswerOf(&a)
			_ = decodeHitReply(&ans, &protocol.HitRequest{})
		}
		_ = rf.Done()
	})
}

// TestItemValidateMatchesValidate: the owner's allocation-free check of a
// charges-only item agrees with HitRequest.Validate on the edges of every
// bound.
func TestItemValidateMatchesValidate(t *testing.T) {
	long := func(n int) []byte { return bytes.Repeat([]byte{'k'}, n) }
	ch := func(kind []byte, inc, cap int64) frame.Charge { return frame.Charge{Kind: kind, Inc: inc, Cap: cap} }
	cases := map[string]frame.Item{
		"ok":            {Tenant: []byte("t"), Charges: []frame.Charge{ch([]byte("hooks"), 1, 2)}},
		"kind at bound": {Tenant: []byte("t"), Charges: []frame.Charge{ch(long(protocol.MaxKindBytes), 1, 2)}},
		"kind too long": {Tenant: []byte("t"), Charges: []frame.Charge{ch(long(protocol.MaxKindBytes+1), 1, 2)}},
		"empty kind":    {Tenant: []byte("t"), Charges: []frame.Charge{ch(nil, 1, 2)}},
		"tenant bound":  {Tenant: long(protocol.MaxNameBytes), Charges: []frame.Charge{ch([]byte("hooks"), 1, 2)}},
		"tenant long":   {Tenant: long(protocol.MaxNameBytes + 1), Charges: []frame.Charge{ch([]byte("hooks"), 1, 2)}},
		"no tenant":     {Charges: []frame.Charge{ch([]byte("hooks"), 1, 2)}},
		"inc > cap":     {Tenant: []byte("t"), Charges: []frame.Charge{ch([]byte("hooks"), 3, 2)}},
		"zero inc":      {Tenant: []byte("t"), Charges: []frame.Charge{ch([]byte("hooks"), 0, 2)}},
		"kind twice":    {Tenant: []byte("t"), Charges: []frame.Charge{ch([]byte("a"), 1, 2), ch([]byte("a"), 1, 2)}},
		"no charges":    {Tenant: []byte("t")},
		"17 charges":    {Tenant: []byte("t"), Charges: make([]frame.Charge, 17)},
		"claim is slow": {Tenant: []byte("t"), Claim: true, Source: []byte("s"), Key: []byte("k"), HookID: []byte("h")},
	}
	for i := range cases["17 charges"].Charges {
		cases["17 charges"].Charges[i] = ch([]byte{byte('a' + i)}, 1, 2)
	}
	for name, it := range cases {
		req := itemRequest(&it)
		err := req.Validate()
		if ValidateItem(&it) == nil && err != nil {
			t.Errorf("%s: the item check accepts, Validate says %v", name, err)
		}
		if ValidateItem(&it) != nil && err == nil {
			t.Errorf("%s: the item check refuses a valid hit: %v", name, ValidateItem(&it))
		}
		if !it.Claim {
			if n := testing.AllocsPerRun(10, func() { _ = ValidateItem(&it) }); err == nil && n != 0 {
				t.Errorf("%s: the item check of a valid charges-only hit allocates %v times", name, n)
			}
		}
	}
}

// itemRequest rebuilds the HitRequest of a decoded item (allocating).
func itemRequest(it *frame.Item) protocol.HitRequest {
	tenant := string(it.Tenant)
	r := protocol.HitRequest{}
	if len(it.Charges) > 0 {
		r.Charges = make([]protocol.Charge, len(it.Charges))
		for i, c := range it.Charges {
			r.Charges[i] = protocol.Charge{Kind: string(c.Kind), Tenant: tenant, IncrementUs: c.Inc, CapacityUs: c.Cap}
		}
	}
	if it.Claim {
		r.Claim = &protocol.ClaimRequest{
			Tenant: tenant, Source: string(it.Source), Key: string(it.Key), HookID: string(it.HookID),
			TTLMs: it.TTLMs, PendingTTLMs: it.PendingMs,
		}
	}
	return r
}
