package cooldown

import (
	"container/list"
	"sync"
)

// localStore is the node-local copy of cooldown state: every write of this
// node, and the shared state as last read or written, per (account, backend)
// key. It answers Load when the shared store cannot, and keeps this node's
// penalties against a shared view that lost them. It holds at most max
// entries, evicting the least recently touched. Safe for concurrent use.
//
// Readings are immutable once built (*reading values are shared, never
// modified); the lock guards the map, the list and the entry fields.
type localStore struct {
	mu      sync.Mutex
	max     int
	entries map[string]*list.Element // of *localEntry
	lru     list.List                // front: most recently touched
}

type localEntry struct {
	key string
	// reading is the newest reading known to this node (its own or shared).
	reading *reading
	// own is the penalty this node set last (nil: none or cleared). A
	// successful shared read keeps the later of it and the shared penalty,
	// unless a shared reading has reached it.
	own *int64
	// seen is the shared penalty as last read or written by this node.
	seen *int64
}

func (e *localEntry) prune(nowMs int64) {
	if e.reading != nil && e.reading.ExpiresAtMs <= nowMs {
		e.reading = nil
	}
	if e.own != nil && *e.own <= nowMs {
		e.own = nil
	}
	if e.seen != nil && *e.seen <= nowMs {
		e.seen = nil
	}
}

func (e *localEntry) empty() bool { return e.reading == nil && e.own == nil && e.seen == nil }

func newLocalStore(max int) *localStore {
	return &localStore{max: max, entries: make(map[string]*list.Element)}
}

// lookup returns the live entry for key (pruned, touched), or nil. With
// create it makes one when there is none, evicting the least recently
// touched entry when the store is full. Call with mu held.
func (l *localStore) lookup(key string, nowMs int64, create bool) *localEntry {
	if el, ok := l.entries[key]; ok {
		e := el.Value.(*localEntry)
		e.prune(nowMs)
		l.lru.MoveToFront(el)
		return e
	}
	if !create {
		return nil
	}
	for l.lru.Len() >= l.max {
		back := l.lru.Back()
		l.lru.Remove(back)
		delete(l.entries, back.Value.(*localEntry).key)
	}
	e := &localEntry{key: key}
	l.entries[key] = l.lru.PushFront(e)
	return e
}

// settle removes e when nothing in it is live. Call with mu held.
func (l *localStore) settle(e *localEntry) {
	if e.empty() {
		if el, ok := l.entries[e.key]; ok {
			l.lru.Remove(el)
			delete(l.entries, e.key)
		}
	}
}

// record applies a reading of this node: the newer reading wins and every
// penalty it has reached is dropped.
func (l *localStore) record(key string, r *reading, nowMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.lookup(key, nowMs, true)
	e.reading = newer(e.reading, r)
	if e.own != nil && *e.own <= r.ObservedAtMs {
		e.own = nil
	}
	if e.seen != nil && *e.seen <= r.ObservedAtMs {
		e.seen = nil
	}
	e.prune(nowMs)
	l.settle(e)
}

// penalize sets this node's penalty (nil clears it). The node's own word
// replaces what it last saw of the shared penalty.
func (l *localStore) penalize(key string, until *int64, nowMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.lookup(key, nowMs, until != nil)
	if e == nil {
		return
	}
	e.own, e.seen = until, nil
	e.prune(nowMs)
	l.settle(e)
}

// observe merges a successful shared read or write (st, already pruned) and
// returns the view to report: the newer of the shared and the local reading,
// and the later of the shared penalty and this node's own one — unless the
// shared reading has reached the own one, which then is dropped.
func (l *localStore) observe(key string, st state, nowMs int64) (*reading, *int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.lookup(key, nowMs, !st.empty())
	if e == nil {
		return nil, nil
	}
	if e.own != nil && st.Reading != nil && *e.own <= st.Reading.ObservedAtMs {
		e.own = nil
	}
	e.reading = newer(e.reading, st.Reading)
	e.seen = st.PenaltyUntilMs
	r, p := e.reading, later(e.seen, e.own)
	l.settle(e)
	return r, p
}

// view is what this node knows of key when the shared store cannot answer.
func (l *localStore) view(key string, nowMs int64) (*reading, *int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.lookup(key, nowMs, false)
	if e == nil {
		return nil, nil
	}
	r, p := e.reading, later(e.seen, e.own)
	l.settle(e)
	return r, p
}
