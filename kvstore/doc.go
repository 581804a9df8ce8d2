// Package kvstore is sluice's one way to a JetStream KV bucket and
// stream: a bucket's configuration (BucketConfig, created or updated to
// it), the revision-checked writes a claim is made of (create-if-absent,
// update at a revision with a per-key TTL, delete at a revision) through
// pipelined publishes whose acks are awaited in bounded number, the
// leader's read of a key, a follow of a bucket's changes, and the mapping
// of nats.go's and nats-server's errors to this package's sentinels
// (ErrExists, ErrWrongLastSequence, ErrNotFound, ErrFull) and to
// protocol.ErrUnavailable (MapError). Safe for concurrent use.
package kvstore
