package lease

import (
	"slices"
	"time"
)

// view is the lease loop's picture of the leases bucket, fed by a watcher.
// Only its methods change it.
//
// It never trusts the absence of an event: a heartbeat or a lease that has
// not been seen rewritten for staleAfter (a TTL plus one renewal period) is
// presumed gone even if its delete or expiry marker was never seen (the
// watcher's consumer may be re-created after a server dies, and markers
// vanish after the bucket's LimitMarkerTTL). Presuming a live lease free
// costs one failed Create, which refreshes it.
type view struct {
	staleAfter time.Duration
	synced     bool   // the watcher delivered all initial values
	maxRev     uint64 // highest revision the watcher delivered

	members  map[string]time.Time // member id -> last heartbeat seen
	suspects map[string]bool      // members that dropped a lease assigned to them

	holders   []string    // partition -> holder id ("" = free)
	revs      []uint64    // partition -> revision of the holder's last write
	seen      []time.Time // partition -> when its holder last wrote it
	freeSince []time.Time // partition -> when it was last seen going free
}

func (v *view) reset(p int, staleAfter time.Duration) {
	now := time.Now()
	*v = view{
		staleAfter: staleAfter,
		members:    make(map[string]time.Time),
		suspects:   make(map[string]bool),
		holders:    make([]string, p),
		revs:       make([]uint64, p),
		seen:       make([]time.Time, p),
		freeSince:  make([]time.Time, p),
	}
	for i := range v.freeSince {
		v.freeSince[i] = now
	}
}

// heartbeat records a member's heartbeat (live) or its removal.
func (v *view) heartbeat(id string, live bool, now time.Time) {
	delete(v.suspects, id) // a heartbeat (or its end) settles a suspicion
	if live {
		v.members[id] = now
	} else {
		delete(v.members, id)
	}
}

// live lists the members the assignment is computed over, sorted: those
// heartbeating within staleAfter and not suspect, plus self.
func (v *view) live(self string, now time.Time) []string {
	ms := make([]string, 0, len(v.members)+1)
	for id, at := range v.members {
		if id != self && !v.suspects[id] && now.Sub(at) <= v.staleAfter {
			ms = append(ms, id)
		}
	}
	ms = append(ms, self)
	slices.Sort(ms)
	return ms
}

// hold records that id wrote partition n's lease at revision rev.
func (v *view) hold(n int, id string, rev uint64, now time.Time) {
	v.holders[n] = id
	v.revs[n] = rev
	v.seen[n] = now
}

// free records that partition n's lease went away.
func (v *view) free(n int, now time.Time) {
	if v.holders[n] != "" {
		v.freeSince[n] = now
	}
	v.holders[n] = ""
}

// holder returns partition n's holder, "" when it is free or its holder has
// not renewed it for staleAfter (then since is when it is presumed free).
func (v *view) holder(n int, now time.Time) (id string, since time.Time) {
	id = v.holders[n]
	if id == "" {
		return "", v.freeSince[n]
	}
	if stale := v.seen[n].Add(v.staleAfter); now.After(stale) {
		return "", stale
	}
	return id, time.Time{}
}

// markSynced records that the watcher delivered all initial values.
func (v *view) markSynced() { v.synced = true }

// observe records that the watcher delivered revision rev.
func (v *view) observe(rev uint64) { v.maxRev = max(v.maxRev, rev) }

// echoed reports whether the watcher delivered revision rev.
func (v *view) echoed(rev uint64) bool { return v.maxRev >= rev }

// raw returns partition n's last seen holder ("" = free) and the revision
// of its write, stale or not.
func (v *view) raw(n int) (id string, rev uint64) { return v.holders[n], v.revs[n] }

// suspect leaves member id out of the assignment until it heartbeats again.
func (v *view) suspect(id string) { v.suspects[id] = true }

// heldBy lists the partitions whose last seen holder is id.
func (v *view) heldBy(id string) []int {
	var ns []int
	for n, h := range v.holders {
		if h == id {
			ns = append(ns, n)
		}
	}
	return ns
}
