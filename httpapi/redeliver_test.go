package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/testkit"
)

// TestRedeliver: a rewind with a deliver subject pushes exactly the
// filtered hooks there, with their headers, at most max_in_flight unacked
// at a time; a deliver subject outside the tenant's namespace is 400 and
// creates nothing.
func TestRedeliver(t *testing.T) {
	t.Parallel()
	a := startApp(t, rewindYAML, "--admin-token", adminToken)
	var want []string
	for i, path := range []string{"/v1/hooks/acme/gh", "/v1/hooks/acme/raw", "/v1/hooks/globex/gh", "/v1/hooks/acme/gh", "/v1/hooks/acme/gh"} {
		r := a.post(path, []byte(`{"n":`+str(i)+`}`), map[string]string{"X-GitHub-Event": "push"})
		mustStatus(t, r, 202)
		if path == "/v1/hooks/acme/gh" {
			want = append(want, str(r.body["id"]))
		}
	}
	// JetStream pushes only while someone listens: created first, the
	// consumer holds all three until the subscription comes.
	const subj = "sluice.redeliver.acme.billing"
	r := a.admin("POST", "/v1/admin/hooks/acme/rewind", adminToken,
		`{"consumer":"push1","sources":["gh"],"deliver_subject":"`+subj+`","max_in_flight":2}`)
	mustStatus(t, r, 201)
	if r.body["deliver_subject"] != subj || r.body["max_in_flight"] != float64(2) || r.body["num_pending"] != float64(3) {
		t.Fatalf("rewind: %s", r.raw)
	}
	sub, err := a.nats.Conn.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	next := func() *nats.Msg {
		t.Helper()
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no redelivered hook: %v", err)
		}
		return m
	}
	m1, m2 := next(), next()
	// Two in flight: the third stays with the server until one is acked.
	ctx := testkit.Context(t)
	c, err := a.nats.JS.PushConsumer(ctx, "HOOKS", "push1")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 2 && info.NumPending == 1
	}, "two hooks in flight, one held back")
	if n, _, _ := sub.Pending(); n != 0 {
		t.Fatalf("%d more hooks delivered beyond max_in_flight", n)
	}
	if err := m1.Ack(); err != nil {
		t.Fatal(err)
	}
	m3 := next()
	var got []string
	for _, m := range []*nats.Msg{m1, m2, m3} {
		if m.Header.Get("Sluice-Tenant") != "acme" || m.Header.Get("Sluice-Source") != "gh" || m.Header.Get("Sluice-Event-Type") != "push" {
			t.Fatalf("redelivered headers %v", m.Header)
		}
		got = append(got, m.Header.Get("Sluice-Hook-Id"))
		_ = m.Ack()
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("redelivered %v, want %v", got, want)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, "every redelivered hook acked")

	for _, c := range []struct{ body, reason string }{
		{`{"consumer":"bad1","deliver_subject":"sluice.redeliver.globex.x"}`, "sluice.redeliver.acme"},
		{`{"consumer":"bad2","deliver_subject":"sluice.v1.quota.reset"}`, "redelivery namespace"},
		{`{"consumer":"bad3","deliver_subject":"sluice.hooks.globex.gh"}`, "redelivery namespace"},
		{`{"consumer":"bad4","deliver_subject":"$JS.API.STREAM.DELETE.HOOKS"}`, "redelivery namespace"},
		{`{"consumer":"bad5","deliver_subject":"sluice.redeliver.acme.>"}`, "redelivery namespace"},
		{`{"consumer":"bad6","rate_bps":1000}`, "needs deliver_subject"},
		{`{"consumer":"bad7","deliver_subject":"` + subj + `","max_in_flight":1025}`, "max_in_flight"},
		{`{"consumer":"bad8","deliver_subject":"` + subj + `","max_in_flight":-1}`, "max_in_flight"},
	} {
		r := a.admin("POST", "/v1/admin/hooks/acme/rewind", adminToken, c.body)
		if r.code != 400 || !strings.Contains(str(r.body["reason"]), c.reason) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.body, r.code, r.raw, c.reason)
		}
	}
	st, err := a.nats.JS.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	names := st.ConsumerNames(ctx)
	var consumers []string
	for n := range names.Name() {
		consumers = append(consumers, n)
	}
	if len(consumers) != 1 || consumers[0] != "push1" {
		t.Fatalf("consumers %v: a refused rewind created one", consumers)
	}
}
