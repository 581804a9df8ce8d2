package owner

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// A reserve or release with a request id is idempotent, and a named slot
// is held until its own TTL.
func TestNamedSlots(t *testing.T) {
	t.Parallel()
	k, e, _, c := single(t)
	ctx := testkit.Context(t)
	reserve := func(id string, ttlMs int64) protocol.ReserveReply {
		t.Helper()
		rep, err := c.Reserve(ctx, protocol.ReserveRequest{Principal: "acme", Key: "jobs", Max: 3, TTLMs: ttlMs, RequestID: id})
		if err != nil {
			t.Fatalf("reserve %q: %v", id, err)
		}
		return rep
	}
	release := func(id string) int64 {
		t.Helper()
		rep, err := c.Release(ctx, protocol.CounterRequest{Principal: "acme", Key: "jobs", RequestID: id})
		if err != nil {
			t.Fatalf("release %q: %v", id, err)
		}
		return rep.Count
	}
	count := func() int64 {
		rep, err := c.Count(ctx, protocol.CounterRequest{Principal: "acme", Key: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Count
	}

	// A reserve whose answer is lost (its reply goes to a subject nobody
	// reads), then the caller's retry with the same id: one slot, the
	// same grant.
	lost, _ := json.Marshal(quota.OwnerRequest{Op: quota.OpReserve, Reserve: &protocol.ReserveRequest{Principal: "acme", Key: "jobs", Max: 3, RequestID: "job-1"}})
	if err := k.Conn.PublishMsg(&nats.Msg{Subject: quota.PartitionSubject(e.prefix, quota.Partition("acme", protocol.DefaultPartitions)), Reply: "lost.answer", Data: lost}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return count() == 1 }, "the lost reserve applied")
	if rep := reserve("job-1", 0); !rep.Granted || rep.Count != 1 {
		t.Fatalf("retried reserve: %+v, want the same grant (count 1)", rep)
	}
	if rep := reserve("job-2", 0); !rep.Granted || rep.Count != 2 {
		t.Fatalf("second job: %+v", rep)
	}
	if rep := reserve("", 0); !rep.Granted || rep.Count != 3 {
		t.Fatalf("an anonymous slot: %+v", rep)
	}
	if rep := reserve("job-3", 0); rep.Granted || rep.Count != 3 {
		t.Fatalf("at max: %+v, want denied", rep)
	}
	if rep := reserve("job-1", 0); !rep.Granted || rep.Count != 3 {
		t.Fatalf("a held slot renewed at max: %+v, want granted", rep)
	}
	// A release retried with the same id releases nothing more.
	if n := release("job-2"); n != 2 {
		t.Fatalf("release job-2: count %d", n)
	}
	if n := release("job-2"); n != 2 {
		t.Fatalf("retried release job-2: count %d, want 2", n)
	}
	if n := release("never-held"); n != 2 {
		t.Fatalf("release of a slot never held: count %d", n)
	}

	// A named slot frees after its own TTL (the anonymous one and job-1
	// stay: the counter's TTL is an hour); renewing keeps it.
	if rep := reserve("short", 1000); !rep.Granted || rep.Count != 3 {
		t.Fatalf("short slot: %+v", rep)
	}
	renewedUntil := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(renewedUntil) {
		if rep := reserve("short", 1000); !rep.Granted {
			t.Fatalf("renewal denied: %+v", rep)
		}
		if n := count(); n != 3 {
			t.Fatalf("while renewed the count is %d, want 3", n)
		}
		time.Sleep(300 * time.Millisecond) // the holder's renewal period, not a wait for a condition
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return count() == 2 }, "the slot freed after its own TTL")
	if rep := reserve("job-4", 0); !rep.Granted || rep.Count != 3 {
		t.Fatalf("after the short slot freed: %+v", rep)
	}
}

func TestRequestIDBounds(t *testing.T) {
	long := strings.Repeat("x", protocol.MaxRequestIDBytes+1)
	for name, err := range map[string]error{
		"long reserve id": (&protocol.ReserveRequest{Principal: "p", Key: "k", Max: 1, RequestID: long}).Validate(),
		"long release id": (&protocol.CounterRequest{Principal: "p", Key: "k", RequestID: long}).Validate(),
		"named, max high": (&protocol.ReserveRequest{Principal: "p", Key: "k", Max: protocol.MaxNamedSlots + 1, RequestID: "a"}).Validate(),
	} {
		if !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: %v, want protocol.ErrInvalid", name, err)
		}
	}
	if err := (&protocol.ReserveRequest{Principal: "p", Key: "k", Max: protocol.MaxNamedSlots, RequestID: strings.Repeat("x", protocol.MaxRequestIDBytes)}).Validate(); err != nil {
		t.Errorf("at the bounds: %v", err)
	}
}

func TestCounterValueCodec(t *testing.T) {
	if n, s, ok := decodeCounter(encodeCounter(7, nil)); !ok || n != 7 || s != nil {
		t.Fatalf("plain: %d %v %v", n, s, ok)
	}
	if string(encodeCounter(7, nil)) != "7" {
		t.Fatal("a counter without named slots is not stored as older owners store it")
	}
	slots := map[string]int64{"a": 1, "b": 2}
	if n, s, ok := decodeCounter(encodeCounter(3, slots)); !ok || n != 3 || len(s) != 2 || s["b"] != 2 {
		t.Fatalf("named: %d %v %v", n, s, ok)
	}
	for _, bad := range []string{"-1", "x", `{"n":-1}`, `{"n":1,"s":5}`} {
		if _, _, ok := decodeCounter([]byte(bad)); ok {
			t.Errorf("%q decoded", bad)
		}
	}
}
