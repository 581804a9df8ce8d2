package hooks_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestListDeadPages: a consumer's dead letters are listed
// MaxDeadLetterList at a time, next naming the last one listed while a
// page is full and 0 after the last page; another consumer's letters are
// not in the listing.
func TestListDeadPages(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	hs, err := hooks.EnsureHub(ctx, k.JS, hooks.StreamConfig{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(consumer, id string) {
		m := nats.NewMsg(hooks.DeadLetterSubject(protocol.DefaultPrefix, "acme", consumer))
		m.Header.Set(hooks.HeaderHookID, id)
		m.Header.Set(hooks.HeaderDeadReason, hooks.DeadMaxDeliver)
		if _, err := k.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	put("other", "x")
	for i := range hooks.MaxDeadLetterList + 1 {
		put("c1", string(rune('a'+i%26)))
	}
	page, next, err := hs.ListDead(ctx, "acme", "c1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != hooks.MaxDeadLetterList || next != page[len(page)-1].Seq || page[0].Seq != 2 {
		t.Fatalf("first page: %d letters from seq %d, next %d", len(page), page[0].Seq, next)
	}
	rest, next, err := hs.ListDead(ctx, "acme", "c1", next)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 1 || next != 0 || rest[0].Reason != hooks.DeadMaxDeliver {
		t.Fatalf("last page: %+v, next %d", rest, next)
	}
}
