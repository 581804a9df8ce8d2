package tenants

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-dev/sluice/protocol"
)

// entry is a bucket entry as the registry's watcher delivers it.
type entry struct {
	key   string
	value []byte
	rev   uint64
	op    jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "sluice_tenants" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Unix(0, 0) }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

const goodAcme = `{"name":"acme","sources":{"gh":{}}}`

// FuzzRecord: any bucket value for tenant acme, applied by the registry
// over a good record of acme, is served only when it decodes, names acme
// and validates — then as that record, with every source answering without
// panicking; anything else leaves acme unserved (fail closed: not the
// previous good record either).
func FuzzRecord(f *testing.F) {
	for _, s := range []string{
		`{"name":"acme","sources":{"gh":{"verify":"github","secrets":[{"id":"s1","sealed":{"kid":"k1","nonce":"AAAAAAAAAAAAAAAA","ct":"AAAA"}}]}}}`,
		`{"name":"acme","sources":{"x":null}}`,
		`{"name":"acme","limits":{"hooks":{"rate":1,"burst":1}},"sources":{"raw":{"dedupe":"header:X-Id","max_body_bytes":10}}}`,
		`{"name":"a","sources":{"s":{"verify":{"scheme":"stripe","params":{"a":"b"}}}}}`,
		`{"name":"acme","allow_unknown":true,"sources":{}}`,
		`{"name":"acme","limits":{"hooks":{"rate":-1,"burst":1}},"sources":{}}`,
		`{"name":"acme","sources":{"bad/name":{}}}`,
		`{"name":"globex","sources":{"gh":{}}}`,
		`{"name":"acme","sources":{"gh":{}}`,
		goodAcme,
	} {
		f.Add([]byte(s))
	}
	keys, err := ParseKeyring([]byte("k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="))
	if err != nil {
		f.Fatal(err)
	}
	key := protocol.EncodeToken("acme")
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewRegistry(nil, WithKeys(keys))
		r.apply(entry{key: key, value: []byte(goodAcme), rev: 1, op: jetstream.KeyValuePut})
		if r.lookup("acme") == nil {
			t.Fatal("the good record is not served")
		}
		r.apply(entry{key: key, value: data, rev: 2, op: jetstream.KeyValuePut})
		var want Tenant
		valid := json.Unmarshal(data, &want) == nil && want.Name == "acme" && want.Validate() == nil
		got := r.lookup("acme")
		switch {
		case got == nil && valid:
			t.Fatalf("a valid record is not served: %s", data)
		case got != nil && !valid:
			t.Fatalf("served a record that does not validate (or names another tenant): %s -> %+v", data, got.rec)
		case got == nil:
			return
		}
		want.Revision = 2
		if !reflect.DeepEqual(got.rec, &want) {
			t.Fatalf("served %+v, want the record as stored %+v", got.rec, &want)
		}
		for _, s := range got.sources {
			if s.unavailable == nil && s.verifier != nil {
				_, _ = s.verifier.Verify(http.Header{}, data, time.Unix(0, 0))
			}
		}
	})
}
