package durability

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// storeSync is one round of the group sync (docs/DESIGN.md "Durability"):
// it makes every write the embedded server acknowledged before the round
// began durable, by fdatasync of what changed since the last round (which
// files and why: docs/DESIGN.md "What one sync round syncs").
type storeSync struct {
	root string // <StoreDir>/jetstream

	mu    sync.Mutex
	seen  map[string]stamp    // path → stamp at its last sync
	hi    map[string]string   // msgs dir → its highest block
	kids  map[string][]string // a listed directory → its entries of interest
	fsync func(f *os.File, data bool) error
	queue []queued        // the syncs of the round being walked
	only  map[string]bool // the streams this round syncs (nil: all)

	// The watched rounds (storesync_watched.go): walkOnly when there is
	// no watch (then every round walks).
	watch    *storeWatch
	walkOnly bool
	dirty    map[string]dirtyItem
	flights  map[string]*flight
	// watchLost is told why the watch stopped, once (nil: nobody).
	watchLost func(error)
}

// queued is a sync the walk found needed; its stamp (when not zero) is
// recorded once it succeeded.
type queued struct {
	path string
	data bool
	st   stamp
}

// maxParallelSyncs bounds the fsyncs of one round run at once: a round's
// files are synced concurrently (the filesystem commits them together —
// ext4 joins concurrent fsyncs into one journal commit — where one after
// the other would pay a device flush each).
const maxParallelSyncs = 16

// stamp identifies a file's content as far as a sync needs: a replaced file
// has another inode, an append another size, an overwrite another mtime.
type stamp struct {
	ino, size, mtime int64
}

func stampOf(fi fs.FileInfo) stamp {
	st := stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(s.Ino)
	}
	return st
}

// newStoreSync is the rounds of the store under storeDir; the watch's
// failure (rounds walk from then on) is logged to log.
func newStoreSync(storeDir string, log *slog.Logger) *storeSync {
	return &storeSync{
		watchLost: func(err error) {
			log.Warn("store sync: the inotify watch failed; sync rounds walk the store from now on (slower)", "error", err)
		},
		root:  filepath.Join(storeDir, "jetstream"),
		seen:  map[string]stamp{},
		hi:    map[string]string{},
		kids:  map[string][]string{},
		fsync: fsyncFile,

		dirty:   map[string]dirtyItem{},
		flights: map[string]*flight{},
	}
}

// fsyncFile is fdatasync for a file's data and fsync for a directory. An
// fdatasync interrupted by a signal (EINTR: on FUSE or network file systems
// the runtime's preemption signal can) is made again, as os.File.Sync does:
// a failed round would stop the node's answers until a restart.
func fsyncFile(f *os.File, data bool) error {
	if data {
		for {
			if err := unix.Fdatasync(int(f.Fd())); err != unix.EINTR {
				return err
			}
		}
	}
	return f.Sync()
}

// round syncs everything written since the last round: it makes every
// write the server acknowledged before the call durable, for the streams
// its file store writes in place (R1; not a stream in the async persist
// mode, nor a replicated one: their writes may not have reached the file
// yet).
func (s *storeSync) round() error { return s.roundOf(nil) }

// roundOver returns a round like round's over the named streams only (and
// the directories above them): the group sync of the writes an answer
// rests on, leaving the others (events, leases) to the record's rounds.
func (s *storeSync) roundOver(names []string) func() error {
	only := map[string]bool{}
	for _, n := range names {
		only[n] = true
	}
	return func() error { return s.roundOf(only) }
}

// roundOf syncs what changed in the streams named in only (nil: every
// stream), and the directories above them. Rounds may overlap: the walk
// and the recording of stamps hold the lock, the syncs do not. A stamp is
// recorded only after its sync succeeded, so a file is skipped only when a
// completed sync covered it as it is (an older round finishing last
// records an older stamp: the next round merely syncs once more).
func (s *storeSync) roundOf(only map[string]bool) error {
	s.mu.Lock()
	if s.watching() {
		return s.watchedRound(only)
	}
	return s.walkLocked(only)
}

// walkLocked is a round that walks the store to find what changed (s.mu
// held on entry; released).
func (s *storeSync) walkLocked(only map[string]bool) error {
	s.queue, s.only = nil, only
	werr := s.walk()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	errs := make([]error, len(q))
	sem := make(chan struct{}, maxParallelSyncs)
	var wg sync.WaitGroup
	for i, it := range q {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.syncPath(it.path, it.data)
		})
	}
	wg.Wait()
	s.mu.Lock()
	for i, it := range q {
		if errs[i] == nil && it.st != (stamp{}) {
			s.seen[it.path] = it.st
		}
	}
	s.mu.Unlock()
	return errors.Join(werr, errors.Join(errs...))
}

// walk queues the syncs of what changed since the last round.
func (s *storeSync) walk() error {
	var errs []error
	if _, _, err := s.dir(filepath.Dir(s.root), false); err != nil {
		return err
	}
	accounts, _, err := s.dir(s.root, false)
	if err != nil {
		return err
	}
	for _, acct := range accounts {
		streamsDir := filepath.Join(s.root, acct, "streams")
		if _, _, err := s.dir(filepath.Join(s.root, acct), false); err != nil {
			errs = append(errs, err)
			continue
		}
		streams, _, err := s.dir(streamsDir, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, st := range streams {
			if s.only != nil && !s.only[st] {
				continue
			}
			if err := s.stream(filepath.Join(streamsDir, st)); err != nil {
				errs = append(errs, err)
			}
		}
		// A clustered server's Raft logs (the meta group's, a replicated
		// or moving stream's): every round takes them, whatever only says.
		raftDir := filepath.Join(s.root, acct, raftDirName)
		groups, _, err := s.dir(raftDir, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, g := range groups {
			if err := s.stream(filepath.Join(raftDir, g)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// raftDirName is the directory of an account (the system account's) that
// holds a clustered server's Raft groups, one directory each laid out as
// a stream is (meta.inf, meta.sum, msgs/<n>.blk: the log), plus files
// nats-server syncs itself (peers.idx, tav.idx, snapshots/).
const raftDirName = "_js_"

// stream syncs one stream's directory (or a Raft group's: the same
// layout without consumers): its meta files, its blocks, its consumers'
// meta files.
func (s *storeSync) stream(dir string) error {
	changed, err := s.files(dir, "meta.inf", "meta.sum")
	if err != nil {
		return err
	}
	if err := s.blocks(filepath.Join(dir, "msgs")); err != nil {
		return err
	}
	obs := filepath.Join(dir, "obs")
	consumers, _, err := s.dir(obs, false)
	if err != nil {
		return err
	}
	for _, c := range consumers {
		cdir := filepath.Join(obs, c)
		cchanged, err := s.files(cdir, "meta.inf", "meta.sum")
		if err != nil {
			return err
		}
		if cchanged {
			s.enqueue(cdir, false, stamp{})
		}
	}
	if changed {
		s.enqueue(dir, false, stamp{})
	}
	return nil
}

// files syncs the named files of dir that changed since their last sync
// (a missing one is skipped) and reports whether any did.
func (s *storeSync) files(dir string, names ...string) (bool, error) {
	changed := false
	for _, n := range names {
		p := filepath.Join(dir, n)
		c, err := s.syncIfChanged(p, true)
		if err != nil {
			return changed, err
		}
		changed = changed || c
	}
	return changed, nil
}

// blocks syncs a msgs directory: the highest block when it changed, and,
// when the directory's entries changed (a new block, a compacted one
// renamed into place, a removed one), every block that changed and the
// directory itself.
func (s *storeSync) blocks(dir string) error {
	names, changed, err := s.dir(dir, true)
	if err != nil {
		return err
	}
	if !changed {
		if h := s.hi[dir]; h != "" {
			_, err := s.syncIfChanged(filepath.Join(dir, h), true)
			return err
		}
		return nil
	}
	best, hi := -1, ""
	for _, n := range names {
		if i, _ := blockIndex(n); i > best {
			best, hi = i, n
		}
		// The entries changed: any block may be new or replaced.
		if _, err := s.syncIfChanged(filepath.Join(dir, n), true); err != nil {
			return err
		}
	}
	s.hi[dir] = hi
	return nil
}

// blockIndex parses "<n>.blk".
func blockIndex(name string) (int, bool) {
	num, ok := strings.CutSuffix(name, ".blk")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	return i, err == nil && i >= 0
}

// dir stats a directory; when it is new or its entries changed since its
// last sync it lists it and syncs it (changed: true). names are its
// entries of interest, kept for the rounds where it did not change:
// subdirectories, or the block files when blocks is set. A missing
// directory is empty.
func (s *storeSync) dir(path string, blocks bool) (names []string, changed bool, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		delete(s.seen, path)
		delete(s.kids, path)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	st := stampOf(fi)
	if old, ok := s.seen[path]; ok && old == st {
		return s.kids[path], false, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, false, err
	}
	for _, e := range ents {
		if blocks {
			if _, ok := blockIndex(e.Name()); ok && e.Type().IsRegular() {
				names = append(names, e.Name())
			}
		} else if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	// A new directory's own entry lives in its parent, which is listed
	// and synced by the same round (its entries changed).
	s.enqueue(path, false, st)
	s.kids[path] = names
	return names, true, nil
}

// syncIfChanged syncs the file at path when it is new or changed since its
// last sync and reports whether it did (a missing file: false).
func (s *storeSync) syncIfChanged(path string, data bool) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		delete(s.seen, path)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st := stampOf(fi)
	if old, ok := s.seen[path]; ok && old == st {
		return false, nil
	}
	s.enqueue(path, data, st)
	return true, nil
}

// enqueue queues a sync of path; st (when not zero) is recorded as its
// stamp once it succeeded.
func (s *storeSync) enqueue(path string, data bool, st stamp) {
	s.queue = append(s.queue, queued{path: path, data: data, st: st})
}

// syncPath opens path and syncs it (a file vanished meanwhile — removed by
// nats-server's own compaction or a stream delete — needs no sync).
func (s *storeSync) syncPath(path string, data bool) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durability: sync %s: %w", path, err)
	}
	err = s.fsync(f, data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("durability: sync %s: %w", path, err)
	}
	return nil
}
