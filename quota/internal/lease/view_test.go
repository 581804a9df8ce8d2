package lease

import (
	"testing"
	"time"
)

// TestViewLapsed: a lease removed by a marker written within lapseAfter of
// its last write (server times) was handed back, even when the watcher
// delivers it late; one removed lapseAfter or more after it lapsed (its
// holder died or stopped renewing); a lease presumed gone without a marker
// lapsed; a partition never seen held has not; a new holder clears it.
func TestViewLapsed(t *testing.T) {
	const ttl = 4 * time.Second
	var v view
	v.reset(4, ttl+ttl/3, ttl*3/4)
	t0 := time.Now()
	v.hold(0, "a", 1, t0, t0)
	v.hold(1, "b", 2, t0, t0)
	v.hold(2, "c", 3, t0, t0)

	// A release: purged soon after a renewal, seen two TTLs later (a
	// slow watcher) — still a release.
	v.free(0, t0.Add(2*ttl), v.lapsedBy(0, t0.Add(ttl/3)))
	if v.lapsed(0, t0.Add(2*ttl)) {
		t.Fatal("a lease purged within a renewal period counts as lapsed")
	}
	v.free(1, t0.Add(ttl), v.lapsedBy(1, t0.Add(ttl))) // an expiry marker, a TTL after the last write
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
	if v.lapsed(3, t0) || v.lapsedBy(3, t0.Add(2*ttl)) {
		t.Fatal("a partition never held counts as lapsed")
	}
	v.hold(1, "d", 4, t0.Add(ttl), t0.Add(ttl))
	v.free(1, t0.Add(ttl+time.Second), v.lapsedBy(1, t0.Add(ttl+time.Second)))
	if v.lapsed(1, t0.Add(ttl+time.Second)) {
		t.Fatal("a new holder's prompt release still counts the old lapse")
	}
}
