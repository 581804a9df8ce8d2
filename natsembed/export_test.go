package natsembed

import (
	"context"
	"log/slog"
	"time"
)

// CheckClusterStartSettle is CheckClusterStart with settle for
// ClusterSettled.
func CheckClusterStartSettle(ctx context.Context, dataDir string, accept bool, settle time.Duration, log *slog.Logger, seqs func(ctx context.Context, names []string) (map[string]uint64, error)) error {
	return checkClusterStart(ctx, dataDir, accept, settle, log, seqs)
}

// RecordSyncs makes s's rounds record the paths they sync (the real fsync
// still runs), and returns what they synced since the last call.
func RecordSyncs(s *Server) (take func() []string) {
	l := &syncLog{}
	s.store.mu.Lock()
	s.store.fsync = l.fsync
	s.store.mu.Unlock()
	return l.take
}

// RaftDirName is raftDirName.
const RaftDirName = raftDirName

// SyncByWalk makes s's rounds find what changed by walking the store (as
// without inotify).
func SyncByWalk(s *Server) {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	if s.store.watch != nil {
		s.store.stopWatching()
	}
	s.store.walkOnly = true
}
