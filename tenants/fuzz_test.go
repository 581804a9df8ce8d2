package tenants

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// FuzzRecord: any bucket value either fails to decode or validate, or
// resolves into a source that answers without panicking; a record is never
// served unless it validates.
func FuzzRecord(f *testing.F) {
	for _, s := range []string{
		`{"name":"acme","sources":{"gh":{"verify":"github","secrets":[{"id":"s1","sealed":{"kid":"k1","nonce":"AAAAAAAAAAAAAAAA","ct":"AAAA"}}]}}}`,
		`{"name":"acme","sources":{"x":null}}`,
		`{"name":"acme","limits":{"hooks":{"rate":1,"burst":1}},"sources":{"raw":{"dedupe":"header:X-Id","max_body_bytes":10}}}`,
		`{"name":"a","sources":{"s":{"verify":{"scheme":"stripe","params":{"a":"b"}}}}}`,
		`{"name":"acme","allow_unknown":true,"sources":{}}`,
	} {
		f.Add([]byte(s))
	}
	keys, err := ParseKeyring([]byte("k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="))
	if err != nil {
		f.Fatal(err)
	}
	r := NewRegistry(nil, keys, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec Tenant
		if json.Unmarshal(data, &rec) != nil || rec.Validate() != nil {
			return
		}
		res := r.resolve(&rec)
		for _, s := range res.sources {
			if s.unavailable == nil && s.verifier != nil {
				_, _ = s.verifier.Verify(http.Header{}, data, time.Unix(0, 0))
			}
		}
	})
}
