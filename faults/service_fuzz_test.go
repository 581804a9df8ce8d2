package faults

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
)

// serviceSubjects are the request subjects of the sluice service
// (PROTOCOL.md "NATS"), without the "sluice.v1." prefix.
var serviceSubjects = []string{
	"quota.hit", "quota.reset", "quota.reserve", "quota.release", "quota.count",
	"claims.settle", "claims.release", "claims.get",
	"replay.claim",
	"cooldown.record", "cooldown.penalize", "cooldown.load",
}

// FuzzServiceRequest sends arbitrary bytes to every endpoint of the sluice
// service of a real app (embedded server, in-process connection) and checks
// the contract: an answer within 5 s, never a 500 (internal_error) and no
// panic; a 400's reason starts with "invalid_request"; a reply without an
// error header is one JSON object.
//
//	go test ./faults -run '^$' -fuzz FuzzServiceRequest -fuzztime 60s
func FuzzServiceRequest(f *testing.F) {
	for i, s := range []string{
		`{"charges":[{"kind":"hooks","tenant":"t","increment_us":1000,"capacity_us":5000}],"claim":{"tenant":"t","source":"s","key":"k","hook_id":"h"}}`,
		`{"tenant":"t"}`,
		`{"principal":"p","key":"k","max":3,"ttl_ms":1000}`,
		`{"principal":"p","key":"k"}`,
		`{"principal":"p","key":"k"}`,
		`{"tenant":"t","source":"s","key":"k","hook_id":"h","revision":1}`,
		`{"tenant":"t","source":"s","key":"k","hook_id":"h","revision":1}`,
		`{"tenant":"t","source":"s","key":"k"}`,
		`{"namespace":"n","key":"k","retain_until":1}`,
		`{"account":"a","backend":"b","observed_at_ms":1,"snapshots":[{"key":"k","label":"l","percent":50,"resets_at_ms":1,"observed_at_ms":1}]}`,
		`{"account":"a","backend":"b","until_ms":null}`,
		`{"account":"a","backends":["b"]}`,
	} {
		f.Add(uint8(i), []byte(s))
	}
	f.Add(uint8(0), []byte(`{"charges":[{"kind":"hooks","tenant":"t","increment_us":9223372036854775807,"capacity_us":9223372036854775807}]}`))
	f.Add(uint8(2), []byte(`{"principal":"p","key":"k","max":9223372036854775807,"ttl_ms":9223372036854775807}`))
	f.Add(uint8(8), []byte(`{"namespace":"n","key":"k","retain_until":253402300799}`))
	f.Add(uint8(3), []byte(`{"principal":"p","key":"k","principal":"q"}`))
	f.Add(uint8(1), []byte("\xff"))
	a := startFuzzServiceApp(f)
	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		subject := serviceSubjects[int(ep)%len(serviceSubjects)]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := a.RequestWithContext(ctx, "sluice.v1."+subject, body)
		if err != nil {
			t.Fatalf("%s %q: %v", subject, body, err)
		}
		code, reason := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
		switch code {
		case "":
			var v map[string]any
			if err := json.Unmarshal(m.Data, &v); err != nil {
				t.Fatalf("%s %q: reply %q is not a JSON object", subject, body, m.Data)
			}
		case "400":
			if !strings.HasPrefix(reason, "invalid_request") {
				t.Fatalf("%s %q: 400 %q", subject, body, reason)
			}
		case "409":
			if reason != "claim_lost" || (subject != "claims.settle" && subject != "claims.release") {
				t.Fatalf("%s %q: 409 %q", subject, body, reason)
			}
		case "503":
			// A store that did not answer in time (fuzzing loads the box).
		default:
			t.Fatalf("%s %q: %s %q %q", subject, body, code, reason, m.Data)
		}
	})
}
