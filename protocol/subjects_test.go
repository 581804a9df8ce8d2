package protocol_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

func TestSubjectsTable(t *testing.T) {
	t.Parallel()
	s, err := protocol.NewSubjects("sluice")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, got, want string }{
		{"settle", s.Settle(), "sluice.v1.events.settle"},
		{"release", s.Release(), "sluice.v1.events.release"},
		{"events", s.Events(), "sluice.v1.events.>"},
		{"claim events", s.ClaimEvents(), "sluice.v1.events.claim.>"},
		{"pending", s.ClaimPending("acme"), "sluice.v1.events.claim.pending.acme"},
		{"committed", s.ClaimCommitted("acme"), "sluice.v1.events.claim.committed.acme"},
		{"released", s.ClaimReleased("acme"), "sluice.v1.events.claim.released.acme"},
		{"expired", s.ClaimExpired("acme"), "sluice.v1.events.claim.expired.acme"},
		{"expired dotted", s.ClaimExpired("a.b"), "sluice.v1.events.claim.expired.a=2Eb"},
		{"expired star", s.ClaimExpired("*"), "sluice.v1.events.claim.expired.=2A"},
		{"split", s.ClaimSplit("a.b"), "sluice.v1.events.claim.split.a=2Eb"},
		{"expired empty", s.ClaimExpired(""), "sluice.v1.events.claim.expired.="},
		{"hook stored", s.HookStored("acme", "gh"), "sluice.v1.events.hook.stored.acme.gh"},
		{"hook stored hostile", s.HookStored("a b", ">"), "sluice.v1.events.hook.stored.a=20b.=3E"},
		{"limit denied", s.LimitDenied("acme"), "sluice.v1.events.limit.denied.acme"},
		{"limit denied dotted", s.LimitDenied("x.>"), "sluice.v1.events.limit.denied.x=2E=3E"},
		{"stored hook", protocol.HookSubject("sluice", "acme", "gh"), "sluice.hooks.acme.gh"},
		{"stored hook dotted", protocol.HookSubject("sluice", "a.b", "c.d"), "sluice.hooks.a=2Eb.c=2Ed"},
		{"typed hook", protocol.TypedHookSubject("sluice", "acme", "gh", "push.x"), "sluice.hooks.acme.gh.push=2Ex"},
		{"typed hook without a type", protocol.TypedHookSubject("sluice", "acme", "gh", ""), "sluice.hooks.acme.gh." + protocol.NoTypeToken},
		{"stored hooks", protocol.HooksSubjects("sluice"), "sluice.hooks.>"},
		{"prefix", s.Prefix(), "sluice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Fatalf("got %q, want %q", c.got, c.want)
			}
		})
	}
}

func TestNewSubjectsRejectsBadPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a..b", ".a", "a.", "a*", "a.>", "a b", "é", strings.Repeat("a", 65)} {
		if _, err := protocol.NewSubjects(p); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("NewSubjects(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

// checkSubject fails unless subject is prefix + fixed + exactly the encoded
// user parts, with no wildcard, whitespace or empty token anywhere.
func checkSubject(t *testing.T, subject, prefix, fixed string, user ...string) {
	t.Helper()
	if strings.ContainsAny(subject, "*> \t\r\n\x00") {
		t.Fatalf("subject %q contains a wildcard or whitespace", subject)
	}
	for i := 0; i < len(subject); i++ {
		if subject[i] < 0x21 || subject[i] > 0x7e {
			t.Fatalf("subject %q has byte %#x", subject, subject[i])
		}
	}
	toks := strings.Split(subject, ".")
	want := strings.Count(prefix, ".") + 1 + strings.Count(fixed, ".") + len(user)
	if len(toks) != want {
		t.Fatalf("subject %q has %d tokens, want %d", subject, len(toks), want)
	}
	for _, tok := range toks {
		if tok == "" {
			t.Fatalf("subject %q has an empty token", subject)
		}
	}
	if !strings.HasPrefix(subject, prefix+fixed+".") {
		t.Fatalf("subject %q does not start with %q", subject, prefix+fixed+".")
	}
	for i, u := range user {
		got, err := protocol.DecodeToken(toks[len(toks)-len(user)+i])
		if err != nil || got != u {
			t.Fatalf("subject %q: user part %d decodes to %q, %v; want %q", subject, i, got, err, u)
		}
	}
}

func FuzzSubjects(f *testing.F) {
	for _, seed := range [][2]string{
		{"acme", "gh"}, {"a.b", "*"}, {">", ""}, {"a b", "x\ty"}, {"=2E", "=="}, {"é", "\x00"}, {"..", ".>"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, tenant, source string) {
		for _, p := range []string{"sluice", "acme.prod-1"} {
			s, err := protocol.NewSubjects(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range []string{protocol.ClaimPending, protocol.ClaimCommitted, protocol.ClaimReleased, protocol.ClaimExpired} {
				checkSubject(t, s.Claim(ev, tenant), p, ".v1.events.claim."+ev, tenant)
			}
			checkSubject(t, s.ClaimPending(tenant), p, ".v1.events.claim.pending", tenant)
			checkSubject(t, s.ClaimCommitted(tenant), p, ".v1.events.claim.committed", tenant)
			checkSubject(t, s.ClaimReleased(tenant), p, ".v1.events.claim.released", tenant)
			checkSubject(t, s.ClaimExpired(tenant), p, ".v1.events.claim.expired", tenant)
			checkSubject(t, s.HookStored(tenant, source), p, ".v1.events.hook.stored", tenant, source)
			checkSubject(t, s.LimitDenied(tenant), p, ".v1.events.limit.denied", tenant)
			checkSubject(t, protocol.HookSubject(p, tenant, source), p, ".hooks", tenant, source)
			// Even an event name from outside stays one token.
			checkSubject(t, s.Claim(source, tenant), p, ".v1.events.claim", source, tenant)
		}
	})
}

func TestSettleEventJSONAndValidate(t *testing.T) {
	t.Parallel()
	ev := protocol.SettleEvent{Tenant: "acme", Source: "gh", Key: "k1", HookID: "h1", Revision: 7}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"tenant":"acme","source":"gh","key":"k1","hook_id":"h1","revision":7}`; string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	bad := map[string]func(*protocol.SettleEvent){
		"no tenant":    func(e *protocol.SettleEvent) { e.Tenant = "" },
		"no source":    func(e *protocol.SettleEvent) { e.Source = "" },
		"no key":       func(e *protocol.SettleEvent) { e.Key = "" },
		"no hook id":   func(e *protocol.SettleEvent) { e.HookID = "" },
		"zero rev":     func(e *protocol.SettleEvent) { e.Revision = 0 },
		"long tenant":  func(e *protocol.SettleEvent) { e.Tenant = strings.Repeat("t", protocol.MaxNameBytes+1) },
		"long source":  func(e *protocol.SettleEvent) { e.Source = strings.Repeat("s", protocol.MaxNameBytes+1) },
		"all is empty": func(e *protocol.SettleEvent) { *e = protocol.SettleEvent{} },
	}
	for name, mut := range bad {
		t.Run(name, func(t *testing.T) {
			e := ev
			mut(&e)
			if err := e.Validate(); !errors.Is(err, protocol.ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestLifecycleJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	b, err := json.Marshal(protocol.Lifecycle{Tenant: "t", Source: "s", Key: "k", HookID: "h", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"tenant":"t","source":"s","key":"k","hook_id":"h","at":"2025-03-04T05:06:07.123456789Z"}`; string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
	b, _ = json.Marshal(protocol.Lifecycle{Tenant: "t", At: at, Revision: 3, Kind: "hooks", RetryAfterMs: 5, Reason: "rate_limited"})
	if want := `{"tenant":"t","source":"","key":"","hook_id":"","at":"2025-03-04T05:06:07.123456789Z","revision":3,"kind":"hooks","retry_after_ms":5,"reason":"rate_limited"}`; string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
}
