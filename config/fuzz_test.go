package config

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// FuzzLoadYAML feeds arbitrary files to the loader: it never panics, every
// error is a "config:" error, and every accepted configuration satisfies the
// invariants the edge relies on.
func FuzzLoadYAML(f *testing.F) {
	if data, err := os.ReadFile("../testdata/edge.yaml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"allow_unknown: false\ntenants: {a: {sources: {b: {dedupe: \"json:x.0\"}}}}\n",
		"defaults: {limits: {hooks: {rate: 1e-3, burst: 1}}}\n",
		"tenants:\n  a:\n    sources:\n      s: {verify: standard_webhooks, secret_env: SECRET}\n",
		"tenants:\n  a: &t {limits: {hooks: {rate: 1, burst: 1}}}\n  b: *t\n",
		"a: &a [*a, *a]\n",
		"routes: [x, y]\ncluster_listen: ':1'\n",
		"partitions: 0x10\nnats_listen: off\n",
		"tenants: {a: {sources: {b: ~}}, c: ~}\n",
		"? [a]\n: b\n",
		"!!binary YQ==: x\n",
	} {
		f.Add([]byte(s))
	}
	getenv := func(name string) string {
		if name == "SECRET" || strings.HasPrefix(name, "S") {
			return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		return ""
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		read := func(string) ([]byte, error) { return data, nil }
		cfg, err := parse([]string{"--config", "fuzz.yaml"}, getenv, nil, read)
		if err != nil {
			if cfg != nil || !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("bad failure: %v, %v", cfg, err)
			}
			return
		}
		if err := cfg.Defaults.Limits.Validate(); err != nil {
			t.Fatalf("defaults: %v", err)
		}
		for tn, tenant := range cfg.Tenants {
			if !ValidName(tn) {
				t.Fatalf("tenant %q", tn)
			}
			if tenant.Limits != nil {
				if err := tenant.Limits.Validate(); err != nil {
					t.Fatalf("tenant %q: %v", tn, err)
				}
			}
			for sn, s := range tenant.Sources {
				got, err := cfg.Source(tn, sn)
				if !ValidName(sn) || err != nil || !got.Configured || s.MaxBodyBytes < 1 || s.MaxBodyBytes > MaxBodyBytesLimit {
					t.Fatalf("source %q/%q: %+v, %v", tn, sn, got, err)
				}
			}
		}
		if _, err := cfg.Source("unlisted-tenant", "x"); (err == nil) != cfg.AllowUnknown {
			t.Fatalf("allow_unknown %v but Source: %v", cfg.AllowUnknown, err)
		}
		if cfg.Partitions < 1 || cfg.Partitions > MaxPartitions || checkPrefix(cfg.Prefix) != nil {
			t.Fatalf("settings: %+v", cfg)
		}
		// Printing and marshalling never fail nor show the secret read
		// through getenv (checked when the file does not itself contain the
		// string, which could then sit in a non-secret field).
		j, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if out := fmt.Sprintf("%+v %#v", cfg, cfg) + string(j); !strings.Contains(string(data), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") && strings.Contains(out, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") {
			t.Fatalf("secret leaked: %s", out)
		}
	})
}
