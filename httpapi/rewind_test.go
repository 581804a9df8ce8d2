package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// rewindYAML: two tenants with typed and untyped sources.
const rewindYAML = `
tenants:
  acme:
    sources:
      gh:  {dedupe: none, event_type: github}
      raw: {dedupe: none}
  globex:
    sources:
      gh: {dedupe: none, event_type: github}
`

// TestRewind: an operator creates a consumer on one tenant's hooks,
// filtered by source and type, from a time or a hook id, and it re-reads
// exactly those hooks.
func TestRewind(t *testing.T) {
	t.Parallel()
	a := startApp(t, rewindYAML, "--admin-token", adminToken)
	post := func(path, typ string) string {
		t.Helper()
		r := a.post(path, []byte(`{}`), map[string]string{"X-GitHub-Event": typ})
		mustStatus(t, r, 202)
		return str(r.body["id"])
	}
	post("/v1/hooks/acme/gh", "push") // before the time
	last := post("/v1/hooks/acme/gh", "issues")
	since := a.stored()[last].Time.Add(time.Nanosecond) // just after the last hook before it
	p1 := post("/v1/hooks/acme/gh", "push")
	post("/v1/hooks/acme/gh", "issues")
	post("/v1/hooks/acme/raw", "push")
	post("/v1/hooks/globex/gh", "push")
	p2 := post("/v1/hooks/acme/gh", "push")

	read := func(consumer string) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := a.nats.JS.Consumer(ctx, "HOOKS", consumer)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := c.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for m := range batch.Messages() {
			ids = append(ids, m.Headers().Get("Sluice-Hook-Id"))
			_ = m.Ack()
		}
		return ids
	}
	r := a.admin("POST", "/v1/admin/hooks/acme/rewind", adminToken,
		`{"consumer":"pushes","durable":true,"sources":["gh"],"types":["push"],"since":"`+since.UTC().Format(time.RFC3339Nano)+`"}`)
	mustStatus(t, r, 201)
	if r.body["num_pending"] != float64(2) {
		t.Fatalf("rewind: %s", r.raw)
	}
	if got := read("pushes"); len(got) != 2 || got[0] != p1 || got[1] != p2 {
		t.Fatalf("re-read %v, want [%s %s]", got, p1, p2)
	}
	if strings.Contains(r.raw, "warnings") {
		t.Fatalf("a warning for a typed source: %s", r.raw)
	}
	// Types on a source without event_type match nothing: the reply says why.
	r = a.admin("POST", "/v1/admin/hooks/acme/rewind", adminToken, `{"consumer":"raw-pushes","sources":["raw"],"types":["push"]}`)
	mustStatus(t, r, 201)
	if r.body["num_pending"] != float64(0) || !strings.Contains(r.raw, "source raw has no event_type") {
		t.Fatalf("types on an untyped source: %s", r.raw)
	}
	r = a.admin("POST", "/v1/admin/hooks/acme/rewind", adminToken, `{"consumer":"from-p1","sources":["gh","raw"],"start_hook_id":"`+p1+`"}`)
	mustStatus(t, r, 201)
	if r.body["num_pending"] != float64(4) || r.body["durable"] != false {
		t.Fatalf("rewind from a hook id: %s", r.raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.nats.JS.Consumer(ctx, "HOOKS", "from-p1")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.Config.InactiveThreshold == 0 || info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("ephemeral consumer: %+v, %v", info, err)
	}
	for _, c := range []struct {
		body string
		code int
	}{
		{`{"consumer":"pushes"}`, 409},
		{`{"consumer":"a.b"}`, 400},
		{`{"consumer":"x","types":["push"]}`, 400},
		{`{"consumer":"x","sources":["gh"],"start_hook_id":"nope"}`, 404},
		{`{"consumer":"x","start_hook_id":"` + p1 + `"}`, 400},
		{`{"consumer":"x","sources":["a b"]}`, 400},
		{`{"consumer":"x","bogus":1}`, 400},
	} {
		if r := a.admin("POST", "/v1/admin/hooks/acme/rewind", adminToken, c.body); r.code != c.code {
			t.Errorf("%s: %d %s, want %d", c.body, r.code, r.raw, c.code)
		}
	}
}
