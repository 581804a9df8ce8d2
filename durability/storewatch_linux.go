//go:build linux

package durability

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// storeWatch tells a round which store files changed since the last one
// without looking: an inotify instance watching every directory of the
// layout the round syncs. The kernel queues IN_MODIFY inside the write(2),
// before it returns, so every write nats-server acked is queued before its
// caller can call Sync. A directory created meanwhile is watched, then
// listed (what was written before its watch counts as changed); a queue
// overflow marks everything changed. storeSync's lock guards it.
type storeWatch struct {
	fd   int
	root string           // the StoreDir
	wds  map[int32]string // watch → directory
	dirs map[string]int32 // directory → watch
	buf  []byte
	// mark is called for each file or directory found changed: its path,
	// data (a file: fdatasync; a directory: fsync) and the stream it
	// belongs to ("" above the streams).
	mark func(path string, data bool, stream string)
}

const watchMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// newStoreWatch watches storeDir's layout and marks everything in it
// changed (the first round syncs what the store holds).
func newStoreWatch(storeDir string, mark func(path string, data bool, stream string)) (*storeWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("durability: inotify: %w", err)
	}
	w := &storeWatch{fd: fd, root: filepath.Clean(storeDir), wds: map[int32]string{}, dirs: map[string]int32{},
		buf: make([]byte, 64<<10), mark: mark}
	if err := w.add(w.root); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *storeWatch) close() {
	if w.fd >= 0 {
		_ = unix.Close(w.fd)
		w.fd = -1
	}
}

// place is where a path sits in the layout (relative to the StoreDir).
type place struct {
	dir    bool   // a directory the round watches and syncs
	file   bool   // a file the round syncs (a block, a meta file)
	stream string // the stream it belongs to ("" above the streams)
}

// placeOf classifies a path under the StoreDir:
//
//	.                                  jetstream   <account>   streams   <stream>   msgs|obs   <n>.blk|<consumer>   meta.*
//	depth 0                            1           2           3         4          5          6                    7
//
// with _js_/<group> in the place of streams/<stream> for a Raft group
// (its log: msgs/<n>.blk, meta.inf, meta.sum; it has no obs).
func (w *storeWatch) placeOf(path string, isDir bool) place {
	rel, err := filepath.Rel(w.root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return place{}
	}
	if rel == "." {
		return place{dir: isDir}
	}
	parts := strings.Split(rel, string(filepath.Separator))
	n := len(parts)
	switch {
	case n == 1:
		return place{dir: isDir && parts[0] == "jetstream"}
	case n == 2: // an account
		return place{dir: isDir}
	case n == 3:
		return place{dir: isDir && (parts[2] == "streams" || parts[2] == raftDirName)}
	}
	if parts[0] != "jetstream" || parts[2] != "streams" && parts[2] != raftDirName {
		return place{}
	}
	st := parts[3]
	if parts[2] == raftDirName {
		st = "" // a Raft group's log: every round takes it
	}
	last := parts[n-1]
	switch {
	case n == 4:
		return place{dir: isDir, stream: st}
	case n == 5 && isDir:
		return place{dir: last == "msgs" || last == "obs", stream: st}
	case n == 5:
		return place{file: last == "meta.inf" || last == "meta.sum", stream: st}
	case n == 6 && parts[4] == "msgs" && !isDir:
		_, ok := blockIndex(last)
		return place{file: ok, stream: st}
	case n == 6 && parts[4] == "obs":
		return place{dir: isDir, stream: st}
	case n == 7 && parts[4] == "obs" && !isDir:
		return place{file: last == "meta.inf" || last == "meta.sum", stream: st}
	}
	return place{}
}

// add watches dir, then marks it and everything of interest in it changed
// (recursively): what was written before the watch existed.
func (w *storeWatch) add(dir string) error {
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil // gone meanwhile: its parent's event says so
	}
	if err != nil {
		return fmt.Errorf("durability: inotify watch %s: %w", dir, err)
	}
	if old, ok := w.dirs[dir]; ok && old != int32(wd) {
		delete(w.wds, old)
	}
	w.wds[int32(wd)], w.dirs[dir] = dir, int32(wd)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durability: list %s: %w", dir, err)
	}
	w.mark(dir, false, w.placeOf(dir, true).stream)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		pl := w.placeOf(p, e.IsDir())
		switch {
		case pl.dir:
			if err := w.add(p); err != nil {
				return err
			}
		case pl.file && e.Type().IsRegular():
			w.mark(p, true, pl.stream)
		}
	}
	return nil
}

// errOverflow is the queue overflowing: the caller marks everything.
var errOverflow = errors.New("durability: inotify queue overflow")

// drain reads every queued event and marks what changed.
func (w *storeWatch) drain() error {
	for {
		n, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EAGAIN) {
			return nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("durability: inotify read: %w", err)
		}
		if n <= 0 {
			return nil
		}
		if err := w.events(w.buf[:n]); err != nil {
			return err
		}
	}
}

func (w *storeWatch) events(b []byte) error {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(ev.Len)
		if size > len(b) {
			return nil
		}
		name := b[unix.SizeofInotifyEvent:size]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		mask, wd := ev.Mask, ev.Wd
		b = b[size:]
		if mask&unix.IN_Q_OVERFLOW != 0 {
			return errOverflow
		}
		dir, ok := w.wds[wd]
		if !ok {
			continue // a watch removed meanwhile
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.wds, wd)
			if w.dirs[dir] == wd {
				delete(w.dirs, dir)
			}
			continue
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 || len(name) == 0 {
			continue
		}
		p := filepath.Join(dir, string(name))
		isDir := mask&unix.IN_ISDIR != 0
		pl := w.placeOf(p, isDir)
		if mask&(unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0 {
			// The directory's entries changed: its sync makes them durable.
			if dp := w.placeOf(dir, true); dp.dir {
				w.mark(dir, false, dp.stream)
			}
		}
		switch {
		case pl.dir && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			if err := w.add(p); err != nil {
				return err
			}
		case pl.file && mask&(unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			w.mark(p, true, pl.stream)
		}
	}
	return nil
}

// rewatch starts afresh after an overflow: every directory watched anew
// and everything marked changed.
func (w *storeWatch) rewatch() error {
	for wd := range w.wds {
		_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
	}
	// Events of the removed watches (IN_IGNORED) are dropped with them.
	for {
		if _, err := unix.Read(w.fd, w.buf); err != nil {
			break
		}
	}
	clear(w.wds)
	clear(w.dirs)
	return w.add(w.root)
}
