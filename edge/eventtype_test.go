package edge_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/edge"
)

// TestEventTypeSubjects: a source with event_type stores each hook under
// "<prefix>.hooks.<tenant>.<source>.<type>" (type encoded as one token,
// "=" when the request has none), so a plain NATS filter selects by type;
// a source without event_type keeps the three-token subject.
func TestEventTypeSubjects(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
gh:  {event_type: github, dedupe: none}
pay: {event_type: "json:data.kind", dedupe: none}
raw: {dedupe: none}
`)
	post := func(path, body string, hdr map[string]string) string {
		t.Helper()
		r := a.post(path, []byte(body), hdr)
		mustStatus(t, r, 202)
		return str(r.body["id"])
	}
	push := post("/v1/hooks/acme/gh", `{}`, map[string]string{"X-GitHub-Event": "push"})
	pr := post("/v1/hooks/acme/gh", `{}`, map[string]string{"X-GitHub-Event": "pull_request"})
	none := post("/v1/hooks/acme/gh", `{}`, nil)
	evil := post("/v1/hooks/acme/gh", `{}`, map[string]string{"X-GitHub-Event": "a.b.>*"})
	paid := post("/v1/hooks/acme/pay", `{"data":{"kind":"invoice.paid"}}`, nil)
	raw := post("/v1/hooks/acme/raw", `{}`, map[string]string{"X-GitHub-Event": "push"})

	st := a.stored()
	for id, want := range map[string]string{
		push: "sluice.hooks.acme.gh.push",
		pr:   "sluice.hooks.acme.gh.pull_request",
		none: "sluice.hooks.acme.gh." + edge.NoTypeToken,
		evil: "sluice.hooks.acme.gh.a=2Eb=2E=3E=2A",
		paid: "sluice.hooks.acme.pay.invoice=2Epaid",
		raw:  "sluice.hooks.acme.raw",
	} {
		if m := st[id]; m == nil || m.Subject != want {
			t.Errorf("hook %s: subject %v, want %s", id, m, want)
		}
	}
	if got := st[paid].Header.Get(edge.HeaderEventType); got != "invoice.paid" {
		t.Errorf("Sluice-Event-Type %q", got)
	}
	if got := st[none].Header.Get(edge.HeaderEventType); got != "" {
		t.Errorf("Sluice-Event-Type %q on a hook without a type", got)
	}

	// A consumer of only the pushes sees exactly one.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := a.nats.JS.CreateOrUpdateConsumer(ctx, "HOOKS", jetstream.ConsumerConfig{
		FilterSubject: edge.TypedHooksSubject("sluice", "acme", "gh", "push"),
		AckPolicy:     jetstream.AckNonePolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 1 {
		t.Fatalf("push consumer has %d pending, want 1", info.NumPending)
	}
}
