package config_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/webhook"
)

const testYAML = `
allow_unknown: false
defaults:
  limits: {hooks: {rate: 50}}
  source: {dedupe: none, max_body_bytes: 2048}
tenants:
  acme:
    limits: {hooks: {rate: 10, burst: 20}}
    sources:
      gh:  {dedupe: github, verify: github, secret: "gh-inline-s3cret"}
      pay: {dedupe: stripe, verify: stripe, secret_env: PAY_SECRET}
      raw: {dedupe: "header:X-Event-Id", max_body_bytes: 65536}
      dflt: {}
      nul:
  bare:
`

func loadTest(t *testing.T) *config.Config {
	t.Helper()
	return mustLoad(t, []string{"--config", writeFile(t, testYAML)}, env(map[string]string{"PAY_SECRET": "whsec_env_s3cret"}))
}

func TestSourceResolution(t *testing.T) {
	cfg := loadTest(t)
	if cfg.AllowUnknown {
		t.Fatal("allow_unknown: false not applied")
	}
	cases := []struct {
		tenant, source string
		verifier       string // "" = none
		dedupe         string
		maxBody        int64
		err            error
	}{
		{"acme", "gh", "github", "github", 2048, nil},
		{"acme", "pay", "stripe", "stripe", 2048, nil},
		{"acme", "raw", "", "header:X-Event-Id", 65536, nil},
		{"acme", "dflt", "", "none", 2048, nil},
		{"acme", "nul", "", "none", 2048, nil},
		{"acme", "other", "", "", 0, config.ErrUnknownSource},
		{"bare", "gh", "", "", 0, config.ErrUnknownSource},
		{"nobody", "gh", "", "", 0, config.ErrUnknownSource},
	}
	for _, tc := range cases {
		s, err := cfg.Source(tc.tenant, tc.source)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s/%s: err = %v; want %v", tc.tenant, tc.source, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.tenant, tc.source, err)
		}
		name := ""
		if s.Verifier != nil {
			name = s.Verifier.Name()
		}
		if name != tc.verifier || s.Dedupe.String() != tc.dedupe || s.MaxBodyBytes != tc.maxBody || !s.Configured {
			t.Errorf("%s/%s = verifier %q dedupe %s max %d configured %v", tc.tenant, tc.source, name, s.Dedupe, s.MaxBodyBytes, s.Configured)
		}
	}

	// The resolved verifiers use the configured secrets (inline and env).
	body := []byte(`{"id":"evt_1"}`)
	gh, _ := cfg.Source("acme", "gh")
	h := http.Header{}
	h.Set(webhook.HeaderGitHubSignature, webhook.SignGitHub("gh-inline-s3cret", body))
	if _, err := gh.Verifier.Verify(h, body, time.Now()); err != nil {
		t.Errorf("gh verify: %v", err)
	}
	pay, _ := cfg.Source("acme", "pay")
	now := time.Unix(1700000000, 0)
	h = http.Header{}
	h.Set(webhook.HeaderStripeSignature, webhook.SignStripe("whsec_env_s3cret", now.Unix(), body))
	if v, err := pay.Verifier.Verify(h, body, now); err != nil || v.MessageID != "evt_1" {
		t.Errorf("pay verify: %+v, %v", v, err)
	}

	// allow_unknown true: unlisted sources get defaults.source.
	open := mustLoad(t, []string{"--config", writeFile(t, "allow_unknown: true\ndefaults: {source: {dedupe: svix}}\ntenants: {acme: {sources: {gh: {dedupe: github}}}}\n")}, nil)
	for _, pair := range [][2]string{{"acme", "other"}, {"someone", "x"}} {
		s, err := open.Source(pair[0], pair[1])
		if err != nil || s.Configured || s.Verifier != nil || s.Dedupe.String() != "svix" || s.MaxBodyBytes != 1048576 {
			t.Errorf("%v: %+v, %v", pair, s, err)
		}
	}
	// No file at all: any source, auto dedupe, 1 MiB.
	s, err := mustLoad(t, nil, nil).Source("t", "s")
	if err != nil || s.Dedupe.String() != "auto" || s.MaxBodyBytes != 1048576 || s.Verifier != nil {
		t.Errorf("built-in default source: %+v, %v", s, err)
	}
}

// TestUnlistedRules: which unlisted tenants and sources are accepted.
func TestUnlistedRules(t *testing.T) {
	verified := "gh: {verify: github, secret: s3cret}"
	cases := []struct {
		yaml string
		// pairs accepted (true) or refused (false)
		want map[[2]string]bool
	}{
		// Tenants listed, allow_unknown unset: only listed sources.
		{"tenants: {a: {sources: {x: {}}}}", map[[2]string]bool{{"a", "x"}: true, {"a", "y"}: false, {"b", "x"}: false}},
		// allow_unknown true: unknown tenants and a plain tenant's
		// unlisted sources, never a verified tenant's.
		{"allow_unknown: true\ntenants: {a: {sources: {x: {}}}, v: {sources: {" + verified + "}}}",
			map[[2]string]bool{{"a", "y"}: true, {"b", "y"}: true, {"v", "gh"}: true, {"v", "unsigned"}: false}},
		// A verified tenant may still say so itself.
		{"allow_unknown: true\ntenants: {v: {allow_unknown: true, sources: {" + verified + "}}}",
			map[[2]string]bool{{"v", "unsigned"}: true}},
		// A tenant's own allow_unknown wins both ways.
		{"allow_unknown: true\ntenants: {c: {allow_unknown: false}}", map[[2]string]bool{{"c", "y"}: false, {"d", "y"}: true}},
		{"tenants: {o: {allow_unknown: true}}", map[[2]string]bool{{"o", "y"}: true, {"p", "y"}: false}},
		// No tenants: the quickstart accepts anything.
		{"defaults: {source: {dedupe: none}}", map[[2]string]bool{{"any", "thing"}: true}},
	}
	for _, c := range cases {
		cfg := mustLoad(t, []string{"--config", writeFile(t, c.yaml+"\n")}, nil)
		for pair, ok := range c.want {
			if _, err := cfg.Source(pair[0], pair[1]); (err == nil) != ok {
				t.Errorf("%q: %v: err %v, want accepted=%v", c.yaml, pair, err, ok)
			}
		}
	}
}

// TestQuickstartLoopbackOnly: without tenants (and without allow_unknown)
// the edge accepts anything, so it must listen on loopback only.
func TestQuickstartLoopbackOnly(t *testing.T) {
	cfg := mustLoad(t, nil, nil)
	if !cfg.AllowUnknown || !cfg.OpenQuickstart {
		t.Fatalf("no file: AllowUnknown %v OpenQuickstart %v", cfg.AllowUnknown, cfg.OpenQuickstart)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:8080", "[::1]:8080"} {
		mustLoad(t, []string{"--http-addr", addr}, nil)
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "10.1.2.3:80"} {
		_, err := config.Parse([]string{"--http-addr", addr}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "--http-addr: "+addr+" is not a loopback address and no tenants are listed") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	// Listing tenants, or saying allow_unknown, lifts it.
	for _, y := range []string{"tenants: {a: {}}\n", "allow_unknown: true\n", "allow_unknown: false\n"} {
		cfg := mustLoad(t, []string{"--http-addr", "0.0.0.0:8080", "--config", writeFile(t, y)}, nil)
		if cfg.OpenQuickstart {
			t.Errorf("%q: OpenQuickstart", y)
		}
	}
}

func TestLimits(t *testing.T) {
	cfg := loadTest(t)
	l, o := cfg.Limits("acme")
	want := config.Limits{Hooks: config.Rate{Rate: 10, Burst: 20}, Bytes: config.Rate{Rate: 10485760, Burst: 20971520}}
	if l != want || o != config.OriginTenant {
		t.Errorf("acme: %+v %s", l, o)
	}
	// defaults.limits.hooks.rate 50 merged with the built-in burst.
	want = config.Limits{Hooks: config.Rate{Rate: 50, Burst: 200}, Bytes: config.Rate{Rate: 10485760, Burst: 20971520}}
	for _, tn := range []string{"bare", "unknown"} {
		if l, o := cfg.Limits(tn); l != want || o != config.OriginDefault {
			t.Errorf("%s: %+v %s", tn, l, o)
		}
	}
	// A tenant's partial limits are completed from the file's defaults.
	cfg = mustLoad(t, []string{"--config", writeFile(t, "defaults: {limits: {bytes: {rate: 5, burst: 6}}}\ntenants: {a: {limits: {hooks: {burst: 3}}}}\n")}, nil)
	l, o = cfg.Limits("a")
	if want := (config.Limits{Hooks: config.Rate{Rate: 100, Burst: 3}, Bytes: config.Rate{Rate: 5, Burst: 6}}); l != want || o != config.OriginTenant {
		t.Errorf("partial: %+v %s", l, o)
	}
}

// TestRateValidate: the one rate rule (internal/limits, which config.Rate
// and httpapi.Rate alias) refuses what gcra.LimitFromRate or LimitFromRateN refuses, and says why.
func TestRateValidate(t *testing.T) {
	for _, c := range []struct {
		r    config.Rate
		want string // "" for valid; else a substring of the error
	}{
		{config.Rate{Rate: 0.5, Burst: 1}, ""},
		{config.Rate{Rate: 1e6, Burst: 1 << 40}, ""},
		{config.Rate{Rate: 0, Burst: 1}, "rate must be a finite number > 0, got 0"},
		{config.Rate{Rate: -1, Burst: 1}, "rate must be a finite number > 0, got -1"},
		{config.Rate{Rate: math.NaN(), Burst: 1}, "rate must be a finite number > 0, got NaN"},
		{config.Rate{Rate: math.Inf(1), Burst: 1}, "rate must be a finite number > 0, got +Inf"},
		{config.Rate{Rate: 1, Burst: 0}, "burst must be >= 1, got 0"},
		// Positive and finite, but no limit fits int64 microseconds.
		{config.Rate{Rate: 1e-300, Burst: 1}, "rate 1e-300 with burst 1: "},
		{config.Rate{Rate: 0.001, Burst: math.MaxInt64}, "with burst 9223372036854775807: "},
		// LimitFromRate's rounded interval fits, but the bytes budget's
		// capacity (burst / rate, rounded once) overflows.
		{config.Rate{Rate: 1e6 / 1.4, Burst: 7e18}, "with burst 7000000000000000000: "},
		{config.Rate{Rate: 1e6 / 2.4, Burst: 4e18}, "with burst 4000000000000000000: "},
	} {
		err := c.r.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.r, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want an error with %q", c.r, err, c.want)
		}
		// The rule agrees with the limits every hook computes, for a hooks
		// and a bytes budget.
		_, herr := gcra.LimitFromRate(c.r.Rate, c.r.Burst)
		_, berr := gcra.LimitFromRateN(c.r.Rate, c.r.Burst, 0)
		if (herr == nil && berr == nil) != (err == nil) {
			t.Errorf("%+v: Validate %v but LimitFromRate %v, LimitFromRateN %v", c.r, err, herr, berr)
		}
	}
	ok := config.Rate{Rate: 1, Burst: 1}
	if err := (config.Limits{Hooks: ok, Bytes: ok}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := config.Limits{Hooks: ok, Bytes: config.Rate{Rate: 1e-300, Burst: 1}}.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "bytes: ") || !errors.Is(err, gcra.ErrInvalidLimit) {
		t.Fatalf("bytes too slow: %v", err)
	}
	if err := (config.Limits{Hooks: config.Rate{Burst: 1}, Bytes: ok}).Validate(); err == nil || !strings.HasPrefix(err.Error(), "hooks: ") {
		t.Fatalf("hooks zero: %v", err)
	}
}

func TestSecretEnv(t *testing.T) {
	y := "tenants:\n  a:\n    sources:\n      sw: {verify: standard_webhooks, secret_env: SW_SECRET}\n"
	p := writeFile(t, y)
	cfg := mustLoad(t, []string{"--config", p}, env(map[string]string{"SW_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}))
	s, _ := cfg.Source("a", "sw")
	body := []byte(`{"test": 2432232314}`)
	h, _ := webhook.StandardHeaders("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_1", 1614265330, body)
	if v, err := s.Verifier.Verify(h, body, time.Unix(1614265330, 0)); err != nil || v.MessageID != "msg_1" {
		t.Fatalf("verify: %+v, %v", v, err)
	}
	if _, err := config.Parse([]string{"--config", p}, nil, nil); err == nil || !strings.Contains(err.Error(), "tenants.a.sources.sw.secret_env: environment variable SW_SECRET is not set") {
		t.Fatalf("missing env: %v", err)
	}
}

// TestRedaction: no secret — source secrets, admin token, NATS password and
// token — appears in any printed, marshalled or logged form of a Config.
func TestRedaction(t *testing.T) {
	secrets := []string{"gh-inline-s3cret", "whsec_env_s3cret", "adm1n-t0ken-0123456789", "n4ts-passw0rd", "n4ts-t0ken"}
	cfg := loadTest(t)
	cfg2 := mustLoad(t, []string{"--admin-token", "adm1n-t0ken-0123456789", "--nats-context", writeFile(t, `{"url": "nats://n:4222", "user": "u", "password": "n4ts-passw0rd"}`)}, nil)
	cfg3 := mustLoad(t, nil, env(map[string]string{"SLUICE_NATS_CONTEXT": writeFile(t, `{"url": "nats://n:4222", "token": "n4ts-t0ken"}`)}))
	// The embedded server's file's passwords neither.
	secrets = append(secrets, "f1le-passw0rd-0123")
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(`authorization { user: a, password: "f1le-passw0rd-0123" }`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg4 := mustLoad(t, []string{"--nats-config", conf}, nil)
	var out strings.Builder
	for _, c := range []*config.Config{cfg, cfg2, cfg3, cfg4} {
		gh := c.Tenants["acme"].Sources["gh"]
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
			fmt.Fprintf(&out, verb+"\n", c)
			fmt.Fprintf(&out, verb+"\n", *c)
			fmt.Fprintf(&out, verb+"\n", c.AdminToken)
			fmt.Fprintf(&out, verb+"\n", c.NATS)
			fmt.Fprintf(&out, verb+"\n", c.Tenants)
			fmt.Fprintf(&out, verb+"\n", gh)
			fmt.Fprintf(&out, verb+"\n", gh.Verifier)
		}
		out.WriteString(fmt.Sprint(c) + fmt.Sprintln(c.NATS.Password, c.NATS.Token))
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(j)
		y, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(y)
		var logs bytes.Buffer
		for _, hnd := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
			slog.New(hnd).Info("cfg", "admin", c.AdminToken, "nats", c.NATS, "cfg", c, "pw", c.NATS.Password)
		}
		out.Write(logs.Bytes())
	}
	all := out.String()
	for _, s := range secrets {
		for _, form := range []string{s, fmt.Sprintf("%x", s), fmt.Sprintf("%X", s)} {
			if strings.Contains(all, form) {
				t.Errorf("secret %q leaks (as %q)", s, form)
			}
		}
	}
	if !strings.Contains(all, config.Redacted) {
		t.Error("no redaction marker at all")
	}
	// The values are still there for those who ask.
	if cfg2.AdminToken.Reveal() != "adm1n-t0ken-0123456789" || cfg2.NATS.Password.Reveal() != "n4ts-passw0rd" || cfg3.NATS.Token.Reveal() != "n4ts-t0ken" {
		t.Error("Reveal")
	}
}

func TestSecret(t *testing.T) {
	var zero config.Secret
	if zero.IsSet() || zero.Reveal() != "" || zero.String() != "" || fmt.Sprint(zero) != "" {
		t.Error("zero Secret")
	}
	if config.NewSecret("").IsSet() {
		t.Error("NewSecret(\"\") is set")
	}
	s := config.NewSecret("x")
	j, _ := json.Marshal(s)
	if !s.IsSet() || s.Reveal() != "x" || s.String() != config.Redacted || string(j) != `"[redacted]"` || fmt.Sprintf("%#v", s) != config.Redacted {
		t.Errorf("Secret: %v %s %#v", s, j, s)
	}
}

func TestValidName(t *testing.T) {
	for _, n := range []string{"a", "A-z_0.9~", strings.Repeat("x", 128)} {
		if !config.ValidName(n) {
			t.Errorf("ValidName(%q) = false", n)
		}
	}
	for _, n := range []string{"", "a/b", "a b", "é", "a*", strings.Repeat("x", 129)} {
		if config.ValidName(n) {
			t.Errorf("ValidName(%q) = true", n)
		}
	}
}

// TestEdgeYAML loads the commented example and checks a few resolutions.
func TestEdgeYAML(t *testing.T) {
	e := env(map[string]string{"ACME_SW_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	cfg := mustLoad(t, []string{"--config", "../testdata/edge.yaml"}, e)
	if cfg.HTTPAddr != "127.0.0.1:8080" || cfg.Partitions != 64 || cfg.PendingTTL != 30*time.Second || cfg.AllowUnknown || cfg.OpenQuickstart {
		t.Errorf("process settings: %+v", cfg)
	}
	want := map[string]struct{ verifier, dedupe string }{
		"acme/gh": {"github", "github"}, "acme/pay": {"stripe", "stripe"}, "acme/sw": {"standard_webhooks", "standard_webhooks"},
		"acme/raw": {"", "header:X-Event-Id"}, "acme/orders": {"", "json:data.order.id"}, "acme/metrics": {"", "none"},
		"globex/shop": {"", "shopify"}, "globex/svix": {"standard_webhooks", "svix"},
	}
	// Listed tenants: unknown tenants and unlisted sources are refused,
	// except in sandbox, which says allow_unknown itself.
	for _, pair := range [][2]string{{"acme", "unlisted"}, {"globex", "x"}, {"nobody", "gh"}} {
		if _, err := cfg.Source(pair[0], pair[1]); !errors.Is(err, config.ErrUnknownSource) {
			t.Errorf("%v: %v, want ErrUnknownSource", pair, err)
		}
	}
	if s, err := cfg.Source("sandbox", "anything"); err != nil || s.Configured || s.Verifier != nil {
		t.Errorf("sandbox/anything: %+v, %v", s, err)
	}
	if s, _ := cfg.Source("acme", "raw"); s.Limits == nil || s.Limits.Hooks != (config.Rate{Rate: 5, Burst: 10}) || s.Limits.Bytes.Rate != 10485760 {
		t.Errorf("acme/raw own limits %+v", s.Limits)
	}
	if s, _ := cfg.Source("acme", "gh"); s.Limits != nil {
		t.Errorf("acme/gh has limits %+v; want the tenant's", s.Limits)
	}
	n := 0
	for tn, tenant := range cfg.Tenants {
		for sn, s := range tenant.Sources {
			n++
			w, ok := want[tn+"/"+sn]
			got := ""
			if s.Verifier != nil {
				got = s.Verifier.Name()
			}
			if !ok || got != w.verifier || s.Dedupe.String() != w.dedupe {
				t.Errorf("%s/%s: verifier %q dedupe %s", tn, sn, got, s.Dedupe)
			}
		}
	}
	if n != len(want) {
		t.Errorf("%d sources; want %d", n, len(want))
	}
	if l, o := cfg.Limits("acme"); o != config.OriginTenant || l.Hooks != (config.Rate{Rate: 10, Burst: 20}) || l.Bytes.Rate != 10485760 {
		t.Errorf("acme limits %+v %s", l, o)
	}
	if s, _ := cfg.Source("acme", "raw"); s.MaxBodyBytes != 65536 {
		t.Errorf("raw max body %d", s.MaxBodyBytes)
	}
	// Flags still win over the file.
	cfg = mustLoad(t, []string{"--config", "../testdata/edge.yaml", "--partitions", "128"}, e)
	if cfg.Partitions != 128 {
		t.Errorf("partitions %d", cfg.Partitions)
	}
	// Without the environment variable the example fails, naming it.
	if _, err := config.Parse([]string{"--config", "../testdata/edge.yaml"}, nil, nil); err == nil || !strings.Contains(err.Error(), "tenants.acme.sources.sw.secret_env: environment variable ACME_SW_SECRET is not set") {
		t.Errorf("without ACME_SW_SECRET: %v", err)
	}
}

// TestNATSUsers: nats_users resolve with their role, tenants and one
// credential; every mistake names the user's field.
func TestNATSUsers(t *testing.T) {
	const pub = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	y := "nats_users:\n" +
		"  svc: {role: service, tenants: [acme], password_env: SVC_PASSWORD}\n" +
		"  reader: {role: consumer, tenants: [acme, globex], nkey: " + pub + "}\n" +
		"  ops: {role: operator, password: operator-password-0123}\n"
	cfg := mustLoad(t, []string{"--config", writeFile(t, y)}, env(map[string]string{"SVC_PASSWORD": "service-password-0123"}))
	if len(cfg.NATSUsers) != 3 {
		t.Fatalf("users %+v", cfg.NATSUsers)
	}
	ops, reader, svc := cfg.NATSUsers[0], cfg.NATSUsers[1], cfg.NATSUsers[2]
	if ops.Name != "ops" || ops.Role != "operator" || ops.Password.Reveal() != "operator-password-0123" ||
		reader.NKey != pub || len(reader.Tenants) != 2 || svc.Password.Reveal() != "service-password-0123" || svc.Tenants[0] != "acme" {
		t.Fatalf("users %+v", cfg.NATSUsers)
	}
	if strings.Contains(fmt.Sprintf("%+v", cfg.NATSUsers), "password-0123") {
		t.Fatal("a printed user shows its password")
	}
	for _, c := range []struct{ yaml, err string }{
		{"nats_users: {s: {role: service, password: p-0123456789abcdef}}", "nats_users.s: authz: invalid: role service needs tenants"},
		{"nats_users: {s: {role: root, password: p-0123456789abcdef}}", `nats_users.s: authz: invalid: unknown role "root"`},
		{"nats_users: {s: {role: service, tenants: [a/b], password: p-0123456789abcdef}}", "nats_users.s.tenants: invalid tenant name"},
		{"nats_users: {s: {role: operator, password: short}}", "nats_users.s: password must be at least 16 bytes"},
		{"nats_users: {s: {role: operator}}", "nats_users.s: give exactly one of password, password_env and nkey"},
		{"nats_users: {s: {role: operator, nkey: SUABC}}", "nats_users.s.nkey: not a public user nkey"},
		{"nats_users: {s: {role: operator, password_env: NOPE}}", `nats_users.s.password_env: environment variable "NOPE" is not set`},
		{"nats_users: {s: {role: service, tenants: acme, password: p-0123456789abcdef}}", "nats_users.s.tenants: want a list"},
	} {
		if _, err := config.Parse([]string{"--config", writeFile(t, c.yaml+"\n")}, nil, nil); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.err)
		}
	}
}

// TestVerifySchemesInFile: a source's verify names any preset, overrides a
// preset's fields, or describes a custom scheme; each verifies what it
// should and nothing else.
func TestVerifySchemesInFile(t *testing.T) {
	const secret = "0123456789abcdef-s3cret"
	y := `
tenants:
  acme:
    sources:
      slack: {verify: slack, secret: "` + secret + `"}
      key:   {verify: {name: api_key, header: X-Hook-Key}, secret: "` + secret + `"}
      lab:   {verify: gitlab, secret: "` + secret + `"}
      own:
        secret: "` + secret + `"
        verify:
          name: acme-signer
          type: hmac
          algorithm: hmac-sha512
          header: X-Sig
          format: single
          prefix: "sha512="
          encoding: hex
          signed: "{timestamp}.{body}"
          timestamp_header: X-Ts
          tolerance: 5m
          fallback: {header: X-Old-Sig, timestamp_header: X-Old-Ts}
`
	cfg := mustLoad(t, []string{"--config", writeFile(t, y)}, env(nil))
	now := time.Unix(1700000000, 0)
	body := []byte(`{"n":1}`)
	ts := "1700000000"
	verify := func(source string, h http.Header, b []byte) (webhook.Verified, error) {
		t.Helper()
		s, err := cfg.Source("acme", source)
		if err != nil || s.Verifier == nil {
			t.Fatalf("%s: %+v, %v", source, s, err)
		}
		return s.Verifier.Verify(h, b, now)
	}
	slackSig := "v0=" + macHex(sha256.New, secret, "v0:"+ts+":"+string(body))
	if v, err := verify("slack", http.Header{"X-Slack-Signature": {slackSig}, "X-Slack-Request-Timestamp": {ts}}, body); err != nil || !v.BodySigned || v.Timestamp != now.Unix() {
		t.Fatalf("slack: %+v, %v", v, err)
	}
	ownSig := "sha512=" + macHex(sha512.New, secret, ts+"."+string(body))
	if v, err := verify("own", http.Header{"X-Sig": {ownSig}, "X-Ts": {ts}}, body); err != nil || !v.BodySigned {
		t.Fatalf("own: %+v, %v", v, err)
	}
	if _, err := verify("own", http.Header{"X-Old-Sig": {ownSig}, "X-Old-Ts": {ts}}, body); err != nil {
		t.Fatalf("own via fallback: %v", err)
	}
	if _, err := verify("own", http.Header{"X-Sig": {ownSig}, "X-Ts": {ts}}, []byte(`{"n":2}`)); err == nil {
		t.Fatal("own verified another body")
	}
	if v, err := verify("key", http.Header{"X-Hook-Key": {secret}}, body); err != nil || v.BodySigned {
		t.Fatalf("key: %+v, %v", v, err)
	}
	if _, err := verify("key", http.Header{"X-Api-Key": {secret}}, body); err == nil {
		t.Fatal("key verified the preset's header after an override")
	}
	if _, err := verify("lab", http.Header{"X-Gitlab-Token": {secret}}, body); err != nil {
		t.Fatalf("gitlab: %v", err)
	}
	s, _ := cfg.Source("acme", "own")
	if s.Verifier.Name() != "acme-signer" {
		t.Fatalf("name %q", s.Verifier.Name())
	}
}

func macHex(h func() hash.Hash, key, msg string) string {
	m := hmac.New(h, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// TestEdgeYAMLHeaderCommands: the commands testdata/edge.yaml's header
// gives to load it work as written — with the environment they set and
// nothing else (the header once said `edge --config testdata/edge.yaml`
// alone, which exits 2 without ACME_SW_SECRET).
func TestEdgeYAMLHeaderCommands(t *testing.T) {
	data, err := os.ReadFile("../testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			break // the header is the leading comment
		}
		line = strings.TrimSpace(strings.TrimPrefix(line, "#"))
		line = strings.TrimSpace(strings.TrimPrefix(line, "Load with:"))
		line, _, _ = strings.Cut(line, "(")
		f := strings.Fields(line)
		vars := map[string]string{}
		for len(f) > 0 && strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "-") {
			k, v, _ := strings.Cut(f[0], "=")
			vars[k] = strings.ReplaceAll(v, "testdata/", "../testdata/")
			f = f[1:]
		}
		if len(f) == 0 || f[0] != "edge" {
			continue
		}
		n++
		args := f[1:]
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "testdata/", "../testdata/")
		}
		cfg, err := config.Parse(args, env(vars), nil)
		if err != nil {
			t.Errorf("header command %q: %v", line, err)
			continue
		}
		if len(cfg.Tenants) == 0 {
			t.Errorf("header command %q loaded no tenants: not the file", line)
		}
	}
	if n == 0 {
		t.Fatal("testdata/edge.yaml's header gives no command to load it")
	}
}
