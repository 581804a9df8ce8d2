package protocol_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", protocol.MaxNameBytes+1)
	ok := protocol.Reading{Account: "a", Backend: "b", ObservedAtMs: 1,
		Snapshots: []protocol.Snapshot{{Key: "k", Label: "l", Percent: 12.5, ResetsAtMs: 2, ObservedAtMs: 1}}}
	with := func(f func(r *protocol.Reading)) *protocol.Reading {
		r := ok
		r.Snapshots = append([]protocol.Snapshot(nil), ok.Snapshots...)
		f(&r)
		return &r
	}
	backends := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "b"
		}
		return out
	}
	minus1 := int64(-1)
	tooLate := protocol.MaxTimeMs + 1
	maxT := protocol.MaxTimeMs
	cases := []struct {
		name  string
		v     interface{ Validate() error }
		field string // "" = valid
	}{
		{"reading ok", with(func(*protocol.Reading) {}), ""},
		{"reading nil snapshots", with(func(r *protocol.Reading) { r.Snapshots = nil }), ""},
		{"reading 256-byte names", with(func(r *protocol.Reading) { r.Account, r.Backend = long[1:], long[1:] }), ""},
		{"reading hostile names", with(func(r *protocol.Reading) { r.Account, r.Backend = "a.>", "*" }), ""},
		{"reading empty account", with(func(r *protocol.Reading) { r.Account = "" }), "account"},
		{"reading long account", with(func(r *protocol.Reading) { r.Account = long }), "account"},
		{"reading empty backend", with(func(r *protocol.Reading) { r.Backend = "" }), "backend"},
		{"reading negative time", with(func(r *protocol.Reading) { r.ObservedAtMs = -1 }), "observed_at_ms"},
		{"reading time beyond 9999", with(func(r *protocol.Reading) { r.ObservedAtMs = tooLate }), "observed_at_ms"},
		{"snapshot NaN", with(func(r *protocol.Reading) { r.Snapshots[0].Percent = math.NaN() }), "snapshots[0].percent"},
		{"snapshot +Inf", with(func(r *protocol.Reading) { r.Snapshots[0].Percent = math.Inf(1) }), "snapshots[0].percent"},
		{"snapshot -Inf", with(func(r *protocol.Reading) { r.Snapshots[0].Percent = math.Inf(-1) }), "snapshots[0].percent"},
		{"snapshot negative resets", with(func(r *protocol.Reading) { r.Snapshots[0].ResetsAtMs = -5 }), "snapshots[0].resets_at_ms"},
		{"snapshot negative observed", with(func(r *protocol.Reading) { r.Snapshots[0].ObservedAtMs = -5 }), "snapshots[0].observed_at_ms"},
		{"snapshot long key", with(func(r *protocol.Reading) { r.Snapshots[0].Key = long }), "snapshots[0].key"},
		{"snapshot long label", with(func(r *protocol.Reading) { r.Snapshots[0].Label = long }), "snapshots[0].label"},
		{"too many snapshots", with(func(r *protocol.Reading) { r.Snapshots = make([]protocol.Snapshot, protocol.MaxSnapshots+1) }), "snapshots"},
		{"penalize ok", &protocol.PenalizeRequest{Account: "a", Backend: "b", UntilMs: &maxT}, ""},
		{"penalize clear", &protocol.PenalizeRequest{Account: "a", Backend: "b"}, ""},
		{"penalize empty account", &protocol.PenalizeRequest{Backend: "b"}, "account"},
		{"penalize long backend", &protocol.PenalizeRequest{Account: "a", Backend: long}, "backend"},
		{"penalize negative until", &protocol.PenalizeRequest{Account: "a", Backend: "b", UntilMs: &minus1}, "until_ms"},
		{"penalize until beyond 9999", &protocol.PenalizeRequest{Account: "a", Backend: "b", UntilMs: &tooLate}, "until_ms"},
		{"load ok", &protocol.LoadRequest{Account: "a", Backends: backends(protocol.MaxBackends)}, ""},
		{"load no account", &protocol.LoadRequest{Backends: []string{"b"}}, "account"},
		{"load no backends", &protocol.LoadRequest{Account: "a"}, "backends"},
		{"load too many backends", &protocol.LoadRequest{Account: "a", Backends: backends(protocol.MaxBackends + 1)}, "backends"},
		{"load empty backend", &protocol.LoadRequest{Account: "a", Backends: []string{"b", ""}}, "backends[1]"},
		{"load long backend", &protocol.LoadRequest{Account: "a", Backends: []string{long}}, "backends[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.v.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("valid input rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, protocol.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), ": "+c.field+" ") && !strings.Contains(err.Error(), ": "+c.field+":") {
				t.Fatalf("error %q does not name %q", err, c.field)
			}
		})
	}
}

func TestWireShapes(t *testing.T) {
	t.Parallel()
	// Requests as PROTOCOL.md writes them.
	var rec protocol.RecordRequest
	in := `{"account":"acme","backend":"openai","observed_at_ms":1700000000000,` +
		`"snapshots":[{"key":"tpm","label":"Tokens/min","percent":12.5,"resets_at_ms":1700000060000,"observed_at_ms":1699999999000}]}`
	if err := json.Unmarshal([]byte(in), &rec); err != nil {
		t.Fatal(err)
	}
	want := protocol.Snapshot{Key: "tpm", Label: "Tokens/min", Percent: 12.5, ResetsAtMs: 1700000060000, ObservedAtMs: 1699999999000}
	if rec.Account != "acme" || rec.Backend != "openai" || rec.ObservedAtMs != 1700000000000 || len(rec.Snapshots) != 1 || rec.Snapshots[0] != want {
		t.Fatalf("record request: %+v", rec)
	}
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	if out, _ := json.Marshal(rec); string(out) != in {
		t.Fatalf("record request round trip:\n%s\n%s", out, in)
	}

	for _, c := range []struct {
		in   string
		want *int64
	}{
		{`{"account":"a","backend":"b","until_ms":123}`, i64(123)},
		{`{"account":"a","backend":"b","until_ms":null}`, nil},
		{`{"account":"a","backend":"b"}`, nil},
	} {
		var p protocol.PenalizeRequest
		if err := json.Unmarshal([]byte(c.in), &p); err != nil || !eq(p.UntilMs, c.want) || p.Account != "a" || p.Backend != "b" {
			t.Fatalf("%s: %+v %v", c.in, p, err)
		}
	}
	if out, _ := json.Marshal(protocol.PenalizeRequest{Account: "a", Backend: "b"}); string(out) != `{"account":"a","backend":"b","until_ms":null}` {
		t.Fatalf("penalize request: %s", out)
	}

	var l protocol.LoadRequest
	if err := json.Unmarshal([]byte(`{"account":"a","backends":["b1","b2"]}`), &l); err != nil || l.Account != "a" || len(l.Backends) != 2 {
		t.Fatalf("load request: %+v %v", l, err)
	}

	reply := protocol.LoadReply{Backends: []protocol.Entry{
		{Backend: "b1", LastCheckedMs: i64(5), Snapshots: []protocol.Snapshot{{Key: "k", Percent: 1}}, PenaltyUntilMs: i64(9), Fallback: true},
		{Backend: "b2"},
	}}
	out, err := json.Marshal(reply)
	if err != nil {
		t.Fatal(err)
	}
	wantReply := `{"backends":[` +
		`{"backend":"b1","last_checked_ms":5,"snapshots":[{"key":"k","label":"","percent":1,"resets_at_ms":0,"observed_at_ms":0}],"penalty_until_ms":9},` +
		`{"backend":"b2","last_checked_ms":null,"snapshots":[],"penalty_until_ms":null}]}`
	if string(out) != wantReply {
		t.Fatalf("load reply:\n got %s\nwant %s", out, wantReply)
	}
	var back protocol.LoadReply
	if err := json.Unmarshal(out, &back); err != nil || len(back.Backends) != 2 || !eq(back.Backends[0].PenaltyUntilMs, i64(9)) || back.Backends[1].LastCheckedMs != nil {
		t.Fatalf("load reply decode: %+v %v", back, err)
	}
	if out, _ := json.Marshal(protocol.OKReply{OK: true}); string(out) != `{"ok":true}` {
		t.Fatalf("ok reply: %s", out)
	}
}

func i64(v int64) *int64 { return &v }
func eq(p *int64, want *int64) bool {
	if p == nil || want == nil {
		return p == nil && want == nil
	}
	return *p == *want
}
