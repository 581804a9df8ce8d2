package durability

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// ReadClusterEveryRound makes r read the cluster's servers and streams at
// every round.
func ReadClusterEveryRound(r *Rounds) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readAge = 0
}

// CheckClusterStartSettle is CheckClusterStart with settle for
// ClusterSettled.
func CheckClusterStartSettle(ctx context.Context, dataDir string, accept bool, settle time.Duration, log *slog.Logger, seqs func(ctx context.Context, names []string) (map[string]uint64, error)) error {
	return checkClusterStart(ctx, dataDir, accept, settle, log, seqs)
}

// NodeAnswer is a cluster node's Answerer, as Start serves it.
func NodeAnswer(srv Embedded, streams []string) Answerer { return newNodeAnswer(srv, streams) }

// StoreRound is a round of the store under storeDir, as Start's group
// sync runs them (released with the test).
func StoreRound(t testing.TB, storeDir string) func() error {
	s := newStoreSync(storeDir, slog.New(slog.DiscardHandler))
	t.Cleanup(s.close)
	return s.round
}
