package hooks_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestShardedHooksStreams: with 3 shards, each tenant's hooks land in its
// shard's stream only, in order, under the subject they always had (the
// stream's subject transform); a resent Nats-Msg-Id is a duplicate
// through the transform, an atomic batch (the forwarder's publish) is
// stored whole through it, and the tenant's reads (Find, Rewind) read its
// shard's stream.
func TestShardedHooksStreams(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	const shards = 3
	sts, err := hooks.EnsureStreams(ctx, k.JS, hooks.StreamConfig{Name: "HOOKS", Prefix: "sluice"}, shards, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hooks.HooksStreams("HOOKS", shards), []string{"HOOKS", "HOOKS_1", "HOOKS_2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("streams %v, want %v", got, want)
	}
	for i, st := range sts {
		if name := st.CachedInfo().Config.Name; name != protocol.HooksStream(i) {
			t.Fatalf("stream %d is %s", i, name)
		}
	}
	store := hooks.NewShardedHookStore(k.JS, "sluice", "HOOKS", shards)
	const tenants, per = 12, 5
	for n := range per {
		for i := range tenants {
			h := hooks.Hook{ID: fmt.Sprintf("h-%d-%d", i, n), Tenant: fmt.Sprintf("t%d", i), Source: "gh", ReceivedAt: time.Now(), Body: []byte(strconv.Itoa(n))}
			if _, err := store.Store(ctx, h); err != nil {
				t.Fatalf("store %s: %v", h.ID, err)
			}
		}
	}
	seen := make(map[string]int)
	for k, st := range sts {
		for _, m := range testkit.StoredMsgs(t, st) {
			tenant := m.Header.Get(hooks.HeaderTenant)
			if want := protocol.Shard(tenant, shards); want != k {
				t.Fatalf("a hook of %s (shard %d) is in stream %s", tenant, want, protocol.HooksStream(k))
			}
			if want := protocol.HookSubject("sluice", tenant, "gh"); m.Subject != want {
				t.Fatalf("stored under %s, want %s", m.Subject, want)
			}
			if string(m.Data) != strconv.Itoa(seen[tenant]) {
				t.Fatalf("%s's hook %d is %q: out of order", tenant, seen[tenant], m.Data)
			}
			seen[tenant]++
		}
	}
	for i := range tenants {
		if n := seen[fmt.Sprintf("t%d", i)]; n != per {
			t.Fatalf("t%d: %d hooks stored, want %d", i, n, per)
		}
	}

	// A resend of a hook id is a duplicate through the transform.
	pub := nats.NewMsg(protocol.ShardPublishSubject("sluice", protocol.Shard("t1", shards), shards, protocol.HookSubject("sluice", "t1", "gh")))
	pub.Data = []byte("again")
	ack, err := k.JS.PublishMsg(ctx, pub, jetstream.WithMsgID("h-1-0"))
	if err != nil || !ack.Duplicate || ack.Stream != protocol.TenantHooksStream("t1", shards) {
		t.Fatalf("resent h-1-0: %+v %v", ack, err)
	}

	// An atomic batch through the transform, as the forwarder publishes.
	batch := "b1"
	subj := protocol.ShardPublishSubject("sluice", protocol.Shard("t2", shards), shards, protocol.HookSubject("sluice", "t2", "gh"))
	for i := 1; i <= 3; i++ {
		m := nats.NewMsg(subj)
		m.Data = []byte(strconv.Itoa(per + i - 1))
		m.Header.Set("Nats-Batch-Id", batch)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("h-2-b%d", i))
		if i < 3 {
			if err := k.Conn.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		r, err := k.Conn.RequestMsgWithContext(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		var pa struct {
			Stream string `json:"stream"`
			Batch  string `json:"batch"`
			Count  int    `json:"count"`
			Error  any    `json:"error"`
		}
		if err := json.Unmarshal(r.Data, &pa); err != nil || pa.Error != nil || pa.Batch != batch || pa.Count != 3 || pa.Stream != protocol.TenantHooksStream("t2", shards) {
			t.Fatalf("batch commit answered %s", r.Data)
		}
	}
	shard2 := sts[protocol.Shard("t2", shards)]
	info, err := shard2.Info(ctx, jetstream.WithSubjectFilter(protocol.HookSubject("sluice", "t2", "gh")))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[protocol.HookSubject("sluice", "t2", "gh")]; n != per+3 {
		t.Fatalf("t2 has %d hooks after the batch, want %d", n, per+3)
	}

	// The tenant's reads find its hooks in its shard's stream.
	for i := range tenants {
		tenant := fmt.Sprintf("t%d", i)
		rec, err := store.Find(ctx, tenant, "gh", fmt.Sprintf("h-%d-3", i), time.Time{})
		if err != nil {
			t.Fatalf("find %s's hook: %v", tenant, err)
		}
		if rec.Subject != protocol.HookSubject("sluice", tenant, "gh") {
			t.Fatalf("found under %s", rec.Subject)
		}
		res, err := store.Rewind(ctx, hooks.RewindSpec{Tenant: tenant, Consumer: "rw-" + tenant})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stream != protocol.TenantHooksStream(tenant, shards) || res.NumPending < per {
			t.Fatalf("rewind of %s: %+v", tenant, res)
		}
	}
}

// TestOneShardStreamUnchanged: with one shard the hooks stream is the
// stream of a fleet without shards — its name, subjects, no transform.
func TestOneShardStreamUnchanged(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	sts, err := hooks.EnsureStreams(ctx, k.JS, hooks.StreamConfig{Name: "HOOKS", Prefix: "sluice"}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	k2 := testkit.New(t)
	plain, err := hooks.EnsureStream(ctx, k2.JS, hooks.StreamConfig{Name: "HOOKS", Prefix: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	got, want := sts[0].CachedInfo().Config, plain.CachedInfo().Config
	if len(sts) != 1 || !reflect.DeepEqual(got, want) || got.SubjectTransform != nil || !reflect.DeepEqual(got.Subjects, []string{"sluice.hooks.>"}) {
		t.Fatalf("one shard: %+v\nwithout shards: %+v", got, want)
	}
	seq, err := hooks.NewShardedHookStore(k.JS, "sluice", "HOOKS", 1).Store(ctx, hooks.Hook{ID: "h", Tenant: "acme", Source: "gh", ReceivedAt: time.Now()})
	if err != nil || seq != 1 {
		t.Fatalf("store: %d %v", seq, err)
	}
}
