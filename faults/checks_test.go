package faults

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// HookKey names the dedupe key of a hook: tenant, source and the dedupe key
// as sent (Key "" means the hook had no key and is not deduped).
type HookKey struct {
	Tenant, Source, Key string
}

func (k HookKey) String() string { return k.Tenant + "/" + k.Source + "/" + k.Key }

// StoredHook is one message of the HOOKS stream.
type StoredHook struct {
	ID string
	HookKey
	Seq uint64
}

// Ledger records what the clients of a scenario were told. It is safe for
// concurrent use.
type Ledger struct {
	mu       sync.Mutex
	answers  map[HookKey]map[string]int // key -> winning id -> answers naming it
	accepted map[string]HookKey         // 202 id -> key
	dupIDs   map[string]HookKey         // ids named by 200 duplicate answers
	codes    map[int]int                // status -> count (0: no answer)
	bad      []string                   // malformed or unexpected 2xx answers
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{
		answers:  map[HookKey]map[string]int{},
		accepted: map[string]HookKey{},
		dupIDs:   map[string]HookKey{},
		codes:    map[int]int{},
	}
}

// Hook records one answer to a POST of a hook with key k: the HTTP status
// (0 when no answer arrived) and, for 202 and 200, the id of the body. A
// 2xx other than 200 and 202 is a violation (Report.Bad).
func (l *Ledger) Hook(k HookKey, code int, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes[code]++
	if code != 202 && code != 200 {
		if code >= 200 && code < 300 {
			l.bad = append(l.bad, fmt.Sprintf("%s: unexpected status %d", k, code))
		}
		return
	}
	if code == 202 {
		l.accepted[id] = k
	} else {
		l.dupIDs[id] = k
	}
	if k.Key == "" {
		return
	}
	m := l.answers[k]
	if m == nil {
		m = map[string]int{}
		l.answers[k] = m
	}
	m[id]++
}

// Bad records an answer for k that broke the protocol (what says how: a
// 2xx body that is not JSON, no id, X-Hook-Id disagreeing with the body, a
// 429 or 503 without Retry-After...). It is a violation, never "no
// answer".
func (l *Ledger) Bad(k HookKey, code int, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes[code]++
	l.bad = append(l.bad, fmt.Sprintf("%s: %s", k, what))
}

// Codes returns how many answers of each status were recorded (0: none).
func (l *Ledger) Codes() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]int, len(l.codes))
	for c, n := range l.codes {
		out[c] = n
	}
	return out
}

// Winners returns the ids the 2xx answers for k named, with how many
// answers named each.
func (l *Ledger) Winners(k HookKey) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for id, n := range l.answers[k] {
		out[id] = n
	}
	return out
}

// Accepted is the number of distinct hooks answered 202.
func (l *Ledger) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

// Answered returns the dedupe keys starting with prefix that were answered
// 2xx, each with the hook ids those answers named.
func (l *Ledger) Answered(prefix string) map[HookKey][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[HookKey][]string{}
	for k, ids := range l.answers {
		if strings.HasPrefix(k.Key, prefix) {
			out[k] = slices.Sorted(maps.Keys(ids))
		}
	}
	return out
}

// Report is the outcome of checking a ledger against the HOOKS stream.
// Missing, UnknownDuplicate and StoredTwice are always violations; Split
// is one unless the scenario allows node-local fallback answers.
type Report struct {
	Accepted   int // distinct hook ids answered 202
	Duplicates int // distinct ids named by 200 answers
	Keys       int // distinct dedupe keys answered 2xx
	Stored     int // messages in the stream
	// Missing: hook ids answered 202 that are not in the stream.
	Missing []string
	// UnknownDuplicate: ids named by a 200 duplicate that are not in the
	// stream (a duplicate must name a stored hook).
	UnknownDuplicate []string
	// StoredTwice: hook ids stored more than once.
	StoredTwice []string
	// Mismatched: hook ids answered 2xx for one key whose stored message
	// carries another tenant, source or dedupe key.
	Mismatched []string
	// Bad: malformed answers (Ledger.Bad), and 2xx statuses other than 200
	// and 202.
	Bad []string
	// Split: dedupe keys whose 2xx answers named more than one hook id.
	Split []HookKey
	// ExtraStored: stored hooks beyond the first for one dedupe key (a hook
	// stored but answered 503 — its ack was lost — and retried; allowed:
	// delivery is at-least-once).
	ExtraStored int
}

// Violations lists what breaks the promises; allowSplit accepts keys with
// more than one winner (node-local fallback in a degraded fleet).
func (r Report) Violations(allowSplit bool) []string {
	var v []string
	add := func(what string, xs []string) {
		if len(xs) > 0 {
			v = append(v, fmt.Sprintf("%d %s (e.g. %s)", len(xs), what, strings.Join(xs[:min(3, len(xs))], ", ")))
		}
	}
	add("hooks answered 202 but not stored", r.Missing)
	add("200 duplicates naming a hook that is not stored", r.UnknownDuplicate)
	add("hook ids stored twice", r.StoredTwice)
	add("hooks stored under another tenant, source or key than answered", r.Mismatched)
	add("malformed answers or unexpected 2xx statuses", r.Bad)
	if !allowSplit && len(r.Split) > 0 {
		ks := make([]string, len(r.Split))
		for i, k := range r.Split {
			ks[i] = k.String()
		}
		add("dedupe keys with more than one winner", ks)
	}
	return v
}

func (r Report) String() string {
	return fmt.Sprintf("accepted %d, duplicates naming %d ids, %d keys, stored %d; missing %d, unknown duplicates %d, stored twice %d, mismatched %d, bad answers %d, split keys %d, extra stored %d",
		r.Accepted, r.Duplicates, r.Keys, r.Stored, len(r.Missing), len(r.UnknownDuplicate), len(r.StoredTwice), len(r.Mismatched), len(r.Bad), len(r.Split), r.ExtraStored)
}

// Check compares the ledger with the stream's content.
func (l *Ledger) Check(stored []StoredHook) Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	byID := make(map[string]int, len(stored))
	keyOf := make(map[string]HookKey, len(stored))
	perKey := map[HookKey]int{}
	r := Report{Accepted: len(l.accepted), Duplicates: len(l.dupIDs), Keys: len(l.answers), Stored: len(stored), Bad: slices.Clone(l.bad)}
	for _, h := range stored {
		byID[h.ID]++
		if byID[h.ID] == 1 {
			keyOf[h.ID] = h.HookKey
		}
		if byID[h.ID] == 2 {
			r.StoredTwice = append(r.StoredTwice, h.ID)
		}
		if h.Key != "" && byID[h.ID] == 1 {
			perKey[h.HookKey]++
		}
	}
	for _, n := range perKey {
		r.ExtraStored += n - 1
	}
	mismatched := map[string]bool{}
	for id, k := range l.accepted {
		if byID[id] == 0 {
			r.Missing = append(r.Missing, id)
		} else if keyOf[id] != k {
			mismatched[id] = true
		}
	}
	for id, k := range l.dupIDs {
		if byID[id] == 0 {
			r.UnknownDuplicate = append(r.UnknownDuplicate, id)
		} else if keyOf[id] != k {
			mismatched[id] = true
		}
	}
	for id := range mismatched {
		r.Mismatched = append(r.Mismatched, fmt.Sprintf("%s stored as %s", id, keyOf[id]))
	}
	for k, ids := range l.answers {
		if len(ids) > 1 {
			r.Split = append(r.Split, k)
		}
	}
	sort.Strings(r.Missing)
	sort.Strings(r.UnknownDuplicate)
	sort.Strings(r.StoredTwice)
	sort.Strings(r.Mismatched)
	sort.Slice(r.Split, func(i, j int) bool { return r.Split[i].String() < r.Split[j].String() })
	return r
}

// Counter tracks one reserve/release counter from the clients' side: the
// slots the clients hold at once (grants minus releases sent) must never
// exceed Max, and no grant may return a count above Max. A reserve or a
// release whose answer never arrived is not counted either way, which only
// makes the check stricter: the server's count is then at least what the
// clients believe they hold.
type Counter struct {
	Max int64

	held     atomic.Int64
	maxHeld  atomic.Int64
	grants   atomic.Int64
	denials  atomic.Int64
	failures atomic.Int64
	leaks    atomic.Int64
	mu       sync.Mutex
	bad      []string
}

// Granted records a granted reserve that returned count.
func (c *Counter) Granted(count int64) {
	c.grants.Add(1)
	h := c.held.Add(1)
	for {
		m := c.maxHeld.Load()
		if h <= m || c.maxHeld.CompareAndSwap(m, h) {
			break
		}
	}
	if count > c.Max || count < 1 || h > c.Max {
		c.mu.Lock()
		c.bad = append(c.bad, fmt.Sprintf("grant with count %d while clients held %d (max %d)", count, h, c.Max))
		c.mu.Unlock()
	}
}

// Denied records a denied reserve.
func (c *Counter) Denied() { c.denials.Add(1) }

// Failed records a reserve that got no answer or an error.
func (c *Counter) Failed() { c.failures.Add(1) }

// Releasing records that a held slot is being given back (call it before
// sending the release).
func (c *Counter) Releasing() { c.held.Add(-1) }

// Leaked records a release that got no answer (the slot may stay taken
// until the counter's TTL).
func (c *Counter) Leaked() { c.leaks.Add(1) }

// CounterStats are a Counter's totals.
type CounterStats struct {
	Grants, Denials, Failures, Leaks, MaxHeld int64
}

func (s CounterStats) String() string {
	return fmt.Sprintf("%d granted, %d denied, %d failed, %d releases unanswered, at most %d held at once",
		s.Grants, s.Denials, s.Failures, s.Leaks, s.MaxHeld)
}

// Stats returns the totals.
func (c *Counter) Stats() CounterStats {
	return CounterStats{c.grants.Load(), c.denials.Load(), c.failures.Load(), c.leaks.Load(), c.maxHeld.Load()}
}

// Violations lists grants that broke the max.
func (c *Counter) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}
