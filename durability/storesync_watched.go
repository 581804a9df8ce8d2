package durability

import (
	"errors"
	"path/filepath"
	"sync"
)

// The watched round (docs/DESIGN.md "Durability"): where inotify works
// (storewatch_linux.go) a round does not stat the store to find what
// changed; the kernel's event queue says, and the round syncs only those
// files (the walk's stats were a tenth of the edge's CPU: docs/BENCHMARKS.md).

// dirtyItem is a file or directory found changed, waiting for a round.
type dirtyItem struct {
	data   bool   // fdatasync (a file) or fsync (a directory)
	stream string // "" above the streams: every round takes it
}

// flight is one sync of a path by one round. A round that must cover a
// path another round is syncing right now (it took the path off the dirty
// set, so this round's drain does not see it) waits for that sync: it
// began after the write this round covers (the write was queued before
// the other round drained), so its end makes the write durable.
type flight struct {
	path   string
	data   bool
	stream string
	done   chan struct{}
	err    error
}

// markDirty records a change found by the watch (s.mu held).
func (s *storeSync) markDirty(path string, data bool, stream string) {
	s.dirty[path] = dirtyItem{data: data, stream: stream}
}

// watching reports whether rounds use the watch, starting it on the first
// call (s.mu held); false: rounds walk (no inotify, or it failed: the walk
// then starts from nothing known, so its first round syncs everything).
func (s *storeSync) watching() bool {
	if s.walkOnly {
		return false
	}
	if s.watch == nil {
		w, err := newStoreWatch(filepath.Dir(s.root), s.markDirty)
		if err != nil {
			s.walkOnly = true
			return false
		}
		s.watch = w
	}
	return true
}

// stopWatching falls back to the walk for good (s.mu held).
func (s *storeSync) stopWatching() {
	s.watch.close()
	s.watch, s.walkOnly = nil, true
	clear(s.dirty)
	clear(s.seen)
}

// finder says how rounds find what changed since the last: "inotify"
// (the kernel's events, storewatch_linux.go) or "stat walk" (no inotify:
// each round stats the store's files). Known after the first round.
func (s *storeSync) finder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch != nil {
		return "inotify"
	}
	return "stat walk"
}

// close releases the watch (a later round walks).
func (s *storeSync) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch != nil {
		s.stopWatching()
	}
	s.walkOnly = true
}

// watchedRound syncs the changed files of the streams in only (nil: all),
// and the directories above them (s.mu held on entry; released).
func (s *storeSync) watchedRound(only map[string]bool) error {
	err := s.watch.drain()
	if errors.Is(err, errOverflow) {
		err = s.watch.rewatch()
	}
	if err != nil {
		// The watch can no longer say what changed (not a failed sync):
		// the walk, starting from nothing known, syncs everything.
		if s.watchLost != nil {
			s.watchLost(err)
		}
		s.stopWatching()
		return s.walkLocked(only)
	}
	var mine, theirs []*flight
	for p, f := range s.flights {
		if _, again := s.dirty[p]; again || f.stream != "" && only != nil && !only[f.stream] {
			continue // written again: this round syncs it anew
		}
		theirs = append(theirs, f)
	}
	for p, it := range s.dirty {
		if it.stream != "" && only != nil && !only[it.stream] {
			continue
		}
		delete(s.dirty, p)
		f := &flight{path: p, data: it.data, stream: it.stream, done: make(chan struct{})}
		s.flights[p] = f
		mine = append(mine, f)
	}
	s.mu.Unlock()
	s.runFlights(mine)
	var errs []error
	for _, f := range theirs {
		<-f.done
		errs = append(errs, f.err)
	}
	s.mu.Lock()
	for _, f := range mine {
		if s.flights[f.path] == f {
			delete(s.flights, f.path)
		}
		if f.err != nil {
			// Not durable: the next round tries again.
			if _, ok := s.dirty[f.path]; !ok {
				s.dirty[f.path] = dirtyItem{data: f.data, stream: f.stream}
			}
			errs = append(errs, f.err)
		}
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// runFlights syncs fs concurrently (at most maxParallelSyncs at once; the
// last one on the calling goroutine), closing each one's done as it ends.
func (s *storeSync) runFlights(fs []*flight) {
	run := func(f *flight) {
		f.err = s.syncPath(f.path, f.data)
		close(f.done)
	}
	if len(fs) == 0 {
		return
	}
	sem := make(chan struct{}, maxParallelSyncs)
	var wg sync.WaitGroup
	for _, f := range fs[:len(fs)-1] {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			run(f)
		})
	}
	run(fs[len(fs)-1])
	wg.Wait()
}
