// Package hooks is the stored hook: the HOOKS streams (one per shard) a
// hub keeps accepted webhooks in and the HookStore that writes them on
// kvstore's lean write path, a leaf's outbox, the managed consumers,
// rewinds and receipts that read them, and the dead letters (the advisory
// capture, DEADLETTER, the copier and the redrive). Subjects and stream
// names come from protocol; httpapi serves all of it over HTTP.
package hooks
