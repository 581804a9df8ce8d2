package quota

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// appendWireHit encodes a decoded item again (the inverse of the decoder).
func appendWireHit(b []byte, it *wireHit) []byte {
	b = append(b, it.op)
	b = binary.AppendUvarint(b, uint64(it.n))
	b = binary.AppendUvarint(b, uint64(it.timeoutMs))
	b = appendBytes(b, string(it.tenant))
	b = binary.AppendUvarint(b, uint64(len(it.charges)))
	for _, c := range it.charges {
		b = appendBytes(b, string(c.kind))
		b = binary.AppendVarint(b, c.inc)
		b = binary.AppendVarint(b, c.cap)
	}
	if !it.claim {
		return append(b, 0)
	}
	b = append(b, 1)
	b = appendBytes(b, string(it.source))
	b = appendBytes(b, string(it.key))
	b = appendBytes(b, string(it.hookID))
	b = binary.AppendVarint(b, it.ttlMs)
	return binary.AppendVarint(b, it.pendingMs)
}

func sampleFrames() [][]byte {
	reqs := []HitRequest{
		{Charges: []Charge{hooks("acme", 3), {Kind: KindBytes, Tenant: "acme", IncrementUs: 10, CapacityUs: 100}}},
		{Charges: []Charge{hooks("beta", 1)}, Claim: &ClaimRequest{Tenant: "beta", Source: "gh", Key: "k-1", HookID: "h", TTLMs: 5, PendingTTLMs: 30_000}},
		{Claim: &ClaimRequest{Tenant: "γ", Source: "s", Key: "", HookID: "x"}},
	}
	var out [][]byte
	for k := 1; k <= len(reqs); k++ {
		f := appendFrameHeader(nil, k)
		for i := range k {
			f = appendHitItem(f, Partition(reqs[i].Tenant(), 64), int64(100*i), &reqs[i])
		}
		out = append(out, f)
	}
	return out
}

func TestFrameRoundTrip(t *testing.T) {
	reqs := []HitRequest{
		{Charges: []Charge{hooks("acme", 3), {Kind: "custom", Tenant: "acme", IncrementUs: 10, CapacityUs: 100}}},
		{Charges: []Charge{hooks("beta", 1)}, Claim: &ClaimRequest{Tenant: "beta", Source: "gh", Key: "k-1", HookID: "h", TTLMs: 5, PendingTTLMs: 30_000}},
	}
	f := appendFrameHeader(nil, len(reqs))
	for i := range reqs {
		f = appendHitItem(f, 7+i, 250, &reqs[i])
	}
	items, err := decodeRequestFrame(f, nil)
	if err != nil || len(items) != 2 {
		t.Fatalf("decode: %v %d", err, len(items))
	}
	for i, it := range items {
		if it.n != 7+i || it.timeoutMs != 250 {
			t.Errorf("item %d: n %d timeout %d", i, it.n, it.timeoutMs)
		}
		got := it.request()
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
	// Reply frames.
	as := []answer{
		{index: 1, result: 1, hookID: "h", revision: 42, limits: []limitPair{{remaining: 0, resetMs: 3600_000}}},
		{index: 0, status: stInvalid, reason: "no"},
		{index: 2, result: 4, retryMs: 17, limits: []limitPair{{0, 5}, {3, 0}}},
		{index: 3, status: stNotOwner, reason: reasonNotOwner},
	}
	b := appendReplyHeader(nil, true, "sluice.v1.quota.m.x", len(as))
	for i := range as {
		b = appendAnswer(b, &as[i])
	}
	rf, err := decodeReplyHeader(b)
	if err != nil || !rf.more || string(rf.route) != "sluice.v1.quota.m.x" || rf.count != len(as) {
		t.Fatalf("reply header: %+v %v", rf, err)
	}
	for i, want := range as {
		var a wireAnswer
		if err := rf.next(&a); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if a.index != want.index || a.status != want.status || string(a.reason) != want.reason || a.result != want.result ||
			string(a.hookID) != want.hookID || a.retryMs != want.retryMs || a.revision != want.revision || a.nLimits != len(want.limits) {
			t.Errorf("answer %d: %+v, want %+v", i, a, want)
		}
		for k := range a.nLimits {
			if a.limits[k] != want.limits[k] {
				t.Errorf("answer %d limit %d: %+v", i, k, a.limits[k])
			}
		}
	}
	if !rf.done() {
		t.Fatal("trailing bytes")
	}
}

// FuzzDecodeRequestFrame: the owner's decoder never panics, never reads
// past its input, and what it accepts encodes back to the same bytes.
//
//	go test -run '^$' -fuzz FuzzDecodeRequestFrame -fuzztime 60s ./quota/
func FuzzDecodeRequestFrame(f *testing.F) {
	for _, s := range sampleFrames() {
		f.Add(s)
	}
	f.Add([]byte{frameMagic, frameVersion, 0})
	f.Add([]byte(`{"op":"hit"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := decodeRequestFrame(data, nil)
		if err != nil {
			if len(items) != 0 {
				t.Fatal("items with an error")
			}
			return
		}
		if len(items) == 0 || len(items) > maxFrameItems {
			t.Fatalf("%d items", len(items))
		}
		again := appendFrameHeader(nil, len(items))
		for i := range items {
			it := &items[i]
			if it.n >= MaxPartitions || it.timeoutMs < 0 || len(it.charges) > maxFrameCharges {
				t.Fatalf("item %d out of bounds: %+v", i, it)
			}
			again = appendWireHit(again, it)
			// The frame's check and the JSON one agree and never panic.
			req := it.request()
			if fe, je := it.validate(), req.Validate(); (fe == nil) != (je == nil) {
				t.Fatalf("item check says %v, HitRequest.Validate says %v: %+v", fe, je, req)
			}
			_ = partitionBytes(it.tenant, DefaultPartitions)
		}
		// Varints have more than one encoding; the canonical form must
		// decode to the same items.
		items2, err := decodeRequestFrame(again, nil)
		if err != nil || len(items2) != len(items) {
			t.Fatalf("re-encoded frame: %v", err)
		}
		if again2 := appendFrameHeader(nil, len(items2)); !bytes.Equal(appendAll(again2, items2), again) {
			t.Fatal("encoding is not stable")
		}
	})
}

func appendAll(b []byte, items []wireHit) []byte {
	for i := range items {
		b = appendWireHit(b, &items[i])
	}
	return b
}

// FuzzDecodeReplyFrame: the client's reply decoder never panics.
//
//	go test -run '^$' -fuzz FuzzDecodeReplyFrame -fuzztime 60s ./quota/
func FuzzDecodeReplyFrame(f *testing.F) {
	b := appendReplyHeader(nil, false, "r", 2)
	b = appendAnswer(b, &answer{index: 0, result: 1, limits: []limitPair{{1, 2}}})
	b = appendAnswer(b, &answer{index: 1, status: stNotOwner, reason: "not_owner"})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		rf, err := decodeReplyHeader(data)
		if err != nil {
			return
		}
		var a wireAnswer
		for range rf.count {
			if rf.next(&a) != nil {
				return
			}
			if a.nLimits > maxFrameCharges || a.status == stAnswered && (a.result == 0 || int(a.result) >= len(resultCodes)) {
				t.Fatalf("accepted %+v", a)
			}
			_ = decodeHitReply(&a, &HitRequest{})
		}
		_ = rf.done()
	})
}

// TestItemValidateMatchesValidate: the owner's allocation-free check of a
// charges-only item agrees with HitRequest.Validate on the edges of every
// bound.
func TestItemValidateMatchesValidate(t *testing.T) {
	long := func(n int) []byte { return bytes.Repeat([]byte{'k'}, n) }
	ch := func(kind []byte, inc, cap int64) wireCharge { return wireCharge{kind: kind, inc: inc, cap: cap} }
	cases := map[string]wireHit{
		"ok":            {tenant: []byte("t"), charges: []wireCharge{ch([]byte("hooks"), 1, 2)}},
		"kind at bound": {tenant: []byte("t"), charges: []wireCharge{ch(long(MaxKindBytes), 1, 2)}},
		"kind too long": {tenant: []byte("t"), charges: []wireCharge{ch(long(MaxKindBytes+1), 1, 2)}},
		"empty kind":    {tenant: []byte("t"), charges: []wireCharge{ch(nil, 1, 2)}},
		"tenant bound":  {tenant: long(MaxNameBytes), charges: []wireCharge{ch([]byte("hooks"), 1, 2)}},
		"tenant long":   {tenant: long(MaxNameBytes + 1), charges: []wireCharge{ch([]byte("hooks"), 1, 2)}},
		"no tenant":     {charges: []wireCharge{ch([]byte("hooks"), 1, 2)}},
		"inc > cap":     {tenant: []byte("t"), charges: []wireCharge{ch([]byte("hooks"), 3, 2)}},
		"zero inc":      {tenant: []byte("t"), charges: []wireCharge{ch([]byte("hooks"), 0, 2)}},
		"kind twice":    {tenant: []byte("t"), charges: []wireCharge{ch([]byte("a"), 1, 2), ch([]byte("a"), 1, 2)}},
		"no charges":    {tenant: []byte("t")},
		"17 charges":    {tenant: []byte("t"), charges: make([]wireCharge, 17)},
		"claim is slow": {tenant: []byte("t"), claim: true, source: []byte("s"), key: []byte("k"), hookID: []byte("h")},
	}
	for i := range cases["17 charges"].charges {
		cases["17 charges"].charges[i] = ch([]byte{byte('a' + i)}, 1, 2)
	}
	for name, it := range cases {
		req := it.request()
		err := req.Validate()
		if it.validate() == nil && err != nil {
			t.Errorf("%s: the item check accepts, Validate says %v", name, err)
		}
		if it.validate() != nil && err == nil {
			t.Errorf("%s: the item check refuses a valid hit: %v", name, it.validate())
		}
		if !it.claim {
			if n := testing.AllocsPerRun(10, func() { _ = it.validate() }); err == nil && n != 0 {
				t.Errorf("%s: the item check of a valid charges-only hit allocates %v times", name, n)
			}
		}
	}
}
