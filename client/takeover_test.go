package client_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/ownerkit"
)

// TestNamedSlotsAcrossTakeover: a reserve with a request id whose answer
// was lost, and one that was answered, are retried after their owner died
// (its connection cut: no lease released, the other owner takes the
// partition over after the lease TTL). The retries get the same grants —
// no second slot for either id — because the named slots live in the
// counter, not in the dead owner.
func TestNamedSlotsAcrossTakeover(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	// A second owner with a connection of its own, to cut.
	nc, err := e.kit.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	doomed := ownerkit.Start(t, nc, nil, quota.WithPartitions(testPartitions), owner.WithLeaseTTL(2*time.Second))
	// A principal whose partition the doomed owner serves.
	principal := ""
	testkit.Eventually(t, 30*time.Second, func() bool {
		for _, n := range doomed.Partitions() {
			for i := 0; principal == "" && i < 1000; i++ {
				if p := fmt.Sprintf("p%d", i); quota.Partition(p, testPartitions) == n {
					principal = p
				}
			}
		}
		return principal != ""
	}, "the second owner serves a partition")
	reserve := func(id string) protocol.ReserveReply {
		t.Helper()
		var rep protocol.ReserveReply
		retryUntil := time.Now().Add(30 * time.Second)
		for {
			var err error
			rep, err = e.c.Reserve(ctx, protocol.ReserveRequest{Principal: principal, Key: "jobs", Max: 3, RequestID: id})
			if err == nil {
				return rep
			}
			if time.Now().After(retryUntil) {
				t.Fatalf("reserve %s: %v", id, err)
			}
			time.Sleep(100 * time.Millisecond) // the caller's retry backoff while nobody serves the partition
		}
	}
	count := func() int64 {
		t.Helper()
		n, err := e.c.Count(ctx, principal, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if rep := reserve("job-1"); !rep.Granted || rep.Count != 1 {
		t.Fatalf("job-1: %+v", rep)
	}
	// job-2's answer is lost: it goes to a subject nobody reads.
	lost, _ := json.Marshal(map[string]any{"op": "reserve", "reserve": protocol.ReserveRequest{Principal: principal, Key: "jobs", Max: 3, RequestID: "job-2"}})
	if err := nc.PublishMsg(&nats.Msg{Subject: fmt.Sprintf("%s.v1.quota.p.%d", protocol.DefaultPrefix, quota.Partition(principal, testPartitions)), Reply: "lost.answer", Data: lost}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return count() == 2 }, "the lost reserve applied")
	nc.Close() // the owner dies
	for _, id := range []string{"job-1", "job-2"} {
		if rep := reserve(id); !rep.Granted || rep.Count != 2 {
			t.Fatalf("%s retried after the takeover: %+v, want its own slot again (count 2)", id, rep)
		}
	}
	if rep := reserve("job-3"); !rep.Granted || rep.Count != 3 {
		t.Fatalf("job-3 after the takeover: %+v, want the last slot", rep)
	}
	if rep := reserve("job-4"); rep.Granted || rep.Count != 3 {
		t.Fatalf("job-4 at max: %+v, want denied", rep)
	}
}
