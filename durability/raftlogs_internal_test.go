package durability

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/testkit"
)

// A clustered server's round syncs its Raft logs too: the meta group's log
// holds the stream assignments (a stream whose assignment a power cut lost
// is deleted as an orphan when the cluster comes back), a replicated or
// moving stream's log its writes.
func TestStoreSyncRaftLogs(t *testing.T) {
	c := testkit.Cluster(t, 3)
	for i, mode := range []string{"watch", "walk"} {
		t.Run(mode, func(t *testing.T) {
			srv := storeOf(t, c.Server(0).StoreDir())
			forMode(t, srv, mode)
			l := &syncLog{}
			srv.store.mu.Lock()
			srv.store.fsync = l.fsync
			srv.store.mu.Unlock()
			take := l.take
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			name := fmt.Sprintf("S%d", i)
			if _, err := c.JetStream(t, 0).CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Replicas: 3}); err != nil {
				t.Fatal(err)
			}
			logOf := func(group string) func(string) bool {
				return func(p string) bool {
					return strings.Contains(p, raftDirName+"/"+group) && strings.Contains(p, "/msgs/") && strings.HasSuffix(p, ".blk")
				}
			}
			// The stream's log gets its first block when its group writes
			// its first entry, which may come after the create's answer:
			// rounds until both logs were synced.
			var got []string
			testkit.Eventually(t, 10*time.Second, func() bool {
				if err := srv.SyncStore(); err != nil {
					t.Fatal(err)
				}
				got = append(got, take()...)
				return slices.ContainsFunc(got, logOf("_meta_")) && slices.ContainsFunc(got, logOf("S-R3F-"))
			}, "the rounds after an R3 stream was created synced the meta group's log and the stream's")
		})
	}
}
