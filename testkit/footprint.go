package testkit

import "github.com/sluice-dev/sluice/internal/footprint"

// FilestoreIdle outlasts what nats-server's file store keeps in memory
// about recent writes (footprint.FilestoreIdle).
const FilestoreIdle = footprint.FilestoreIdle

// LiveHeap is the Go heap in use after two collections
// (footprint.LiveHeap): the difference between two calls is what was
// built (and kept) in between, the in-process server's structures
// included.
func LiveHeap() uint64 { return footprint.LiveHeap() }

// DirBytes is the total size of the regular files under dir
// (footprint.DirBytes).
func DirBytes(dir string) (int64, error) { return footprint.DirBytes(dir) }
