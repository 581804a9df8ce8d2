package lease

import (
	"slices"
	"time"
)

// view is the lease loop's picture of the leases bucket, fed by a watcher;
// only its methods change it. It never trusts the absence of an event: a
// heartbeat or lease not seen rewritten for staleAfter (a TTL plus a
// renewal period) is presumed gone even without a marker (a watcher's
// consumer may be re-created, markers vanish after LimitMarkerTTL).
// Presuming a live lease free costs one failed Create, which refreshes it.
type view struct {
	staleAfter time.Duration
	lapseAfter time.Duration // a lease gone this long (server time) after its last write lapsed
	synced     bool          // the watcher delivered all initial values
	maxRev     uint64        // highest revision the watcher delivered

	members  map[string]member // member id -> its last heartbeat seen
	suspects map[string]bool   // members that dropped a lease assigned to them

	holders   []string    // partition -> holder id ("" = free)
	revs      []uint64    // partition -> revision of the holder's last write
	seen      []time.Time // partition -> when its holder last wrote it
	written   []time.Time // partition -> the server time of that write (zero: unknown)
	freeSince []time.Time // partition -> when it was last seen going free
	lapses    []bool      // partition -> its last holder's lease lapsed (see lapsed)
}

func (v *view) reset(p int, staleAfter, lapseAfter time.Duration) {
	now := time.Now()
	*v = view{
		staleAfter: staleAfter,
		lapseAfter: lapseAfter,
		members:    make(map[string]member),
		suspects:   make(map[string]bool),
		holders:    make([]string, p),
		revs:       make([]uint64, p),
		seen:       make([]time.Time, p),
		written:    make([]time.Time, p),
		freeSince:  make([]time.Time, p),
		lapses:     make([]bool, p),
	}
	for i := range v.freeSince {
		v.freeSince[i] = now
	}
}

// member is a heartbeat seen: when, and the server it names.
type member struct {
	at     time.Time
	server string
}

// heartbeat records a member's heartbeat (live), naming the server it is
// connected to, or its removal.
func (v *view) heartbeat(id, server string, live bool, now time.Time) {
	delete(v.suspects, id) // a heartbeat (or its end) settles a suspicion
	if live {
		v.members[id] = member{at: now, server: server}
	} else {
		delete(v.members, id)
	}
}

// live lists the members the assignment is computed over, sorted: those
// heartbeating within staleAfter and not suspect, plus self.
func (v *view) live(self string, now time.Time) []string {
	ms := make([]string, 0, len(v.members)+1)
	for id, m := range v.members {
		if id != self && !v.suspects[id] && now.Sub(m.at) <= v.staleAfter {
			ms = append(ms, id)
		}
	}
	ms = append(ms, self)
	slices.Sort(ms)
	return ms
}

// hosts returns the server each of ids last named in its heartbeat, self's
// own (selfServer) where the view has not seen it yet.
func (v *view) hosts(ids []string, self, selfServer string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		m, ok := v.members[id]
		switch {
		case ok:
			out[i] = m.server
		case id == self:
			out[i] = selfServer
		}
	}
	return out
}

// hold records that id wrote partition n's lease at revision rev, at
// server time written.
func (v *view) hold(n int, id string, rev uint64, now, written time.Time) {
	v.holders[n] = id
	v.lapses[n] = false
	v.revs[n] = rev
	v.seen[n] = now
	v.written[n] = written
}

// free records that partition n's lease went away; lapsed: see lapsed.
func (v *view) free(n int, now time.Time, lapsed bool) {
	if v.holders[n] != "" {
		v.freeSince[n] = now
		v.lapses[n] = lapsed
	}
	v.holders[n] = ""
}

// lapsedBy reports whether a marker written at server time at, removing
// partition n's lease, ends a lapse (see lapsed) rather than a release.
func (v *view) lapsedBy(n int, at time.Time) bool {
	return !v.written[n].IsZero() && at.Sub(v.written[n]) >= v.lapseAfter
}

// lapsed reports whether partition n's last seen holder stopped renewing
// its lease rather than handing it back: the marker that removed it was
// written lapseAfter or more after the lease's last write (both server
// times, so a slow client cannot blur them), when fencing had already
// stopped the holder serving it — an expiry comes a TTL after the last
// write, while a release's purge must come before the TTL runs out (it is
// conditional on the lease's revision). A lease presumed gone without a
// marker (stale) lapsed too. A partition never seen held has not lapsed.
func (v *view) lapsed(n int, now time.Time) bool {
	if v.holders[n] != "" {
		return now.Sub(v.seen[n]) > v.staleAfter
	}
	return v.lapses[n]
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
