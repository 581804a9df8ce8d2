package service

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
)

// claimBodies are settle bodies in and out of the Go client's encoding.
var claimBodies = []string{
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7}`,
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7,"ttl_ms":60000}`,
	`{"tenant":"a\u003cb","source":"gh","key":"k\"1","hook_id":"h1","revision":1}`,
	`{"TENANT":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7}`, // case: strict ignores it
	`{"tenant":"acme","Tenant":"evil","source":"gh","key":"k1","hook_id":"h1","revision":7}`,
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7,"tenant":"b"}`, // repeated
	`{"tenant":"acme", "source":"gh","key":"k1","hook_id":"h1","revision":7}`,             // spacing
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7,"extra":1}`,
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7.5}`,
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":-1}`,
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":"7"}`,
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7}x`,
	`{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":0,"ttl_ms":0}`,
	`{"tenant":null,"source":"gh","key":"k1","hook_id":"h1","revision":7}`,
	"{\"tenant\":\"ac\xffme\",\"source\":\"gh\",\"key\":\"k1\",\"hook_id\":\"h1\",\"revision\":7}",
	`[1]`, `null`, ``,
}

// decodeClaim decodes every body exactly as decodeStrict does: the same
// request, the same error.
func TestDecodeClaimIsDecodeStrict(t *testing.T) {
	for _, body := range claimBodies {
		var fast, strict protocol.ClaimsRequest
		ferr := decodeClaim([]byte(body), &fast)
		serr := decodeStrict([]byte(body), &strict)
		if !reflect.DeepEqual(fast, strict) || (ferr == nil) != (serr == nil) || ferr != nil && ferr.Error() != serr.Error() {
			t.Errorf("%s:\n decodeClaim  %+v, %v\n decodeStrict %+v, %v", body, fast, ferr, strict, serr)
		}
	}
}

// hitBodies are quota.hit bodies in and out of the Go client's encoding.
var hitBodies = func() []string {
	bodies := []string{
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000,"capacity_us":1000000}],"claim":null}`,
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000,"capacity_us":1000000}],"claim":{"tenant":"acme","source":"gh","key":"k","hook_id":"h"}}`,
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000,"capacity_us":1000000}],"claim":{"tenant":"acme","source":"gh","key":"k","hook_id":"h","ttl_ms":5,"pending_ttl_ms":6}}`,
		`{"charges":null,"claim":{"tenant":"acme","source":"gh","key":"k","hook_id":"h"}}`,
		`{"charges":[],"claim":null}`,
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":"1000","capacity_us":1000000}],"claim":null}`,
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000.5,"capacity_us":1000000}],"claim":null}`,
		`{"charges":[{"KIND":"hooks","tenant":"acme","increment_us":1000,"capacity_us":1000000}],"claim":null}`,
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000,"capacity_us":1000000}],"claim":null,"charges":[]}`,
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":2000000,"capacity_us":1000000}],"claim":null}`,
		`{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000,"capacity_us":1000000}],"claim":{"tenant":"beta","source":"gh","key":"k","hook_id":"h"}}`,
		"{\"charges\":[{\"kind\":\"hooks\",\"tenant\":\"ac\xffme\",\"increment_us\":1000,\"capacity_us\":1000000}],\"claim\":null}",
		`{"charges":[],"claim":null} `,
		`[1]`, `null`, ``,
	}
	// More charges than decodeStrict takes, in the client's encoding.
	many := `{"charges":[` + strings.Repeat(`{"kind":"hooks","tenant":"acme","increment_us":1,"capacity_us":10},`, maxArrayItems) +
		`{"kind":"hooks","tenant":"acme","increment_us":1,"capacity_us":10}],"claim":null}`
	return append(bodies, many)
}()

// decodeHit decodes and checks every body exactly as decode with
// decodeStrict does: the same request, the same error.
func TestDecodeHitIsDecodeStrict(t *testing.T) {
	for _, body := range hitBodies {
		fast, ferr := decodeHit([]byte(body))
		strict, serr := decode([]byte(body), (*protocol.HitRequest).Validate)
		if !reflect.DeepEqual(fast, strict) || (ferr == nil) != (serr == nil) || ferr != nil && ferr.Error() != serr.Error() {
			t.Errorf("%.120s:\n decodeHit    %+v, %v\n decodeStrict %+v, %v", body, fast, ferr, strict, serr)
		}
	}
}

// The Go client's hit takes the one-Unmarshal path.
func TestDecodeHitCanonicalIsFast(t *testing.T) {
	body, err := json.Marshal(protocol.HitRequest{
		Charges: []protocol.Charge{{Kind: protocol.KindHooks, Tenant: "acme", IncrementUs: 1000, CapacityUs: 1_000_000}},
		Claim:   &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: "k1", HookID: "h1", PendingTTLMs: 30_000},
	})
	if err != nil {
		t.Fatal(err)
	}
	fast := testing.AllocsPerRun(100, func() { _, _ = decodeHit(body) })
	strict := testing.AllocsPerRun(100, func() { _, _ = decode(body, (*protocol.HitRequest).Validate) })
	if fast >= strict {
		t.Errorf("decodeHit of the client's bytes allocates %.0f times, decodeStrict %.0f: not the fast path", fast, strict)
	}
}

// The Go client's bytes take the one-Unmarshal path.
func TestDecodeClaimCanonicalIsFast(t *testing.T) {
	body, err := json.Marshal(protocol.ClaimsRequest{Tenant: "acme", Source: "gh", Key: "k1", HookID: "h1", Revision: 7, TTLMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	var req protocol.ClaimsRequest
	fast := testing.AllocsPerRun(100, func() { _ = decodeClaim(body, &req) })
	strict := testing.AllocsPerRun(100, func() { _ = decodeStrict(body, &req) })
	if fast >= strict {
		t.Errorf("decodeClaim of the client's bytes allocates %.0f times, decodeStrict %.0f: not the fast path", fast, strict)
	}
}

func BenchmarkDecodeClaim(b *testing.B) {
	body := []byte(claimBodies[1])
	var req protocol.ClaimsRequest
	b.Run("decodeClaim", func(b *testing.B) {
		for b.Loop() {
			_ = decodeClaim(body, &req)
		}
	})
	b.Run("decodeStrict", func(b *testing.B) {
		for b.Loop() {
			_ = decodeStrict(body, &req)
		}
	})
}
