// Package footprint measures what sluice keeps in memory and on disk: the
// live heap, a store directory's bytes, and how long to wait before the
// file store's caches of recent writes are gone. It is read by the
// benchmarks (testkit's re-exports, quota/owner's memory benchmark and
// cmd/sluice-bench's memory row), never by a library at run time.
package footprint

import (
	"io/fs"
	"path/filepath"
	"runtime"
	"time"
)

// FilestoreIdle outlasts what nats-server's file store keeps in memory
// about recent writes: a message block's cache (dropped after 10 s idle)
// and its per-block subject index (2 min). After it, the heap a stream
// holds is what its old messages cost.
const FilestoreIdle = 2*time.Minute + 10*time.Second

// LiveHeap is the Go heap in use after two collections: the difference
// between two calls is what was built (and kept) in between, the
// in-process server's structures included.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// DirBytes is the total size of the regular files under dir.
func DirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}
