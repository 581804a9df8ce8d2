package lease

import (
	"testing"
	"time"
)

// TestViewLapsed: a lease that went away within a renewal period of its
// last write was handed back; one that went away (or was last written)
// lapseAfter or more ago lapsed (its holder died or stopped renewing); a
// partition never seen held has not lapsed; a new holder clears it.
func TestViewLapsed(t *testing.T) {
	const ttl = 4 * time.Second
	var v view
	v.reset(4, ttl+ttl/3, ttl*3/4)
	t0 := time.Now()
	v.hold(0, "a", 1, t0)
	v.hold(1, "b", 2, t0)
	v.hold(2, "c", 3, t0)

	v.free(0, t0.Add(ttl/3)) // a release: purged soon after a renewal
	if v.lapsed(0, t0.Add(ttl/3)) {
		t.Fatal("a lease purged within a renewal period counts as lapsed")
	}
	v.free(1, t0.Add(ttl)) // an expiry marker, a TTL after the last write
	if !v.lapsed(1, t0.Add(ttl)) {
		t.Fatal("an expired lease does not count as lapsed")
	}
	// Partition 2's holder stopped writing and no marker was seen: presumed
	// gone after staleAfter, and lapsed.
	if v.lapsed(2, t0.Add(ttl)) {
		t.Fatal("a held lease within staleAfter counts as lapsed")
	}
	if id, _ := v.holder(2, t0.Add(2*ttl)); id != "" || !v.lapsed(2, t0.Add(2*ttl)) {
		t.Fatalf("a stale lease: holder %q, lapsed %v", id, v.lapsed(2, t0.Add(2*ttl)))
	}
	if v.lapsed(3, t0) {
		t.Fatal("a partition never held counts as lapsed")
	}
	v.hold(1, "d", 4, t0.Add(ttl))
	v.free(1, t0.Add(ttl+time.Second))
	if v.lapsed(1, t0.Add(ttl+time.Second)) {
		t.Fatal("a new holder's prompt release still counts the old lapse")
	}
}
