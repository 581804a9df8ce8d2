package kvstore

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Forget removes every message of key from the bucket's stream without
// writing a marker (a stream purge by subject), so it works in a bucket at
// its MaxMsgs limit, where a purge marker would be refused. Watchers see no
// delete: use it only for keys nobody watches (replay claims). Forgetting
// an absent key is not an error.
func (b *Bucket) Forget(ctx context.Context, key string) error {
	return MapError(b.stream.Purge(ctx, jetstream.WithPurgeSubject(b.prefix+key)))
}
