package testkit

import (
	"io/fs"
	"path/filepath"
	"runtime"
)

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
