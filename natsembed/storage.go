package natsembed

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
)

// ErrStorage is wrapped by Server.StorageFailure.
var ErrStorage = errors.New("natsembed: JetStream cannot write")

// storageWatch remembers the first critical write error the server
// logged. nats-server's file store keeps such an error on the stream
// (every later write of that stream fails, even once space is back) and a
// clustered server shuts JetStream down after one: neither recovers
// without a restart of the process.
type storageWatch struct {
	first atomic.Pointer[string]
}

// see returns line unchanged, remembering it when it reports a write that
// failed for lack of space or a critical write error.
func (w *storageWatch) see(line string) string {
	if strings.Contains(line, "no space left on device") || strings.Contains(line, "critical write error") ||
		strings.Contains(line, "Critical write error") || strings.Contains(line, "JetStream out of") {
		w.first.CompareAndSwap(nil, &line)
	}
	return line
}

// StorageFailure is nil while JetStream can write. After the server
// reported a critical write error (a full disk) or shut JetStream down, it
// wraps ErrStorage and says which: the server cannot write again without a
// restart of the process, whatever space is freed.
func (s *Server) StorageFailure() error {
	if l := s.storage.first.Load(); l != nil {
		return fmt.Errorf("%w: %s", ErrStorage, *l)
	}
	if s.ns.JetStreamConfig() != nil && !s.ns.JetStreamEnabled() {
		return fmt.Errorf("%w: JetStream was shut down", ErrStorage)
	}
	return nil
}

// FreeBytes is the space left to unprivileged writers on the filesystem of
// the store directory.
func (s *Server) FreeBytes() (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.StoreDir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
