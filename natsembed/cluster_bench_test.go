package natsembed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/testkit"
)

// BenchmarkClusterPublish measures what nats-server's sync always costs an
// R3 stream on a local 3-node cluster (docs/RELIABILITY.md "Durability
// levels"): 1 KiB publishes, 64 in flight, acked by a quorum.
//
//	flock /tmp/sluice-heavy.lock go test -run '^$' -bench BenchmarkClusterPublish -benchtime 3s ./natsembed/
func BenchmarkClusterPublish(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync_always=%v", sync), func(b *testing.B) {
			c := testkit.Cluster(b, 3, testkit.WithSyncAlways(sync))
			js := c.JetStream(b, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}); err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 1024)
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			testkit.InFlight(b, 64, func(i int) error {
				_, err := js.Publish(ctx, "r3.x", body)
				return err
			})
		})
	}
}
