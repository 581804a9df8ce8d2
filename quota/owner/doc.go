// Package owner is the owner side of sluice's quota fleet: a Worker is one
// member of the fleet of partition owners. It takes the leases that
// rendezvous hashing over the live members gives it (quota/internal/lease),
// serves each held partition's subject and its own member subject, decides
// hits (GCRA charges, then the dedupe claim) and reserve/release counters,
// and answers in the owner protocol of quota's wire.go. A quota.Client in
// the same process reaches it without NATS through quota.LocalOwner.
//
// Map of the files, in the order a request reads them:
//
//	worker.go       Worker: wiring (New), Start and Stop
//	options.go      the owner's own options (lease TTL, member id, in-flight bound, sync, dedupe TTL)
//	owner.go        the Worker as the lease loop's owner (acquired, lost, released) and its shutdown
//	tenure.go       one held partition: its subscription, JSON requests, counters, refunds
//	serve_frame.go  serving a batch frame as a sequence of steps; its claims' creates pipelined
//	local.go        the in-process path (quota.LocalOwner): a hit for a partition this Worker serves
//	decide.go       the decision core of a hit (charges, then the claim write) and its answer
//	settle.go       settle items: the commit of a claim a frame hit took, made durable (grants)
//	state.go        a partition's GCRA buckets
//	wire.go         replies, error replies, the counts bucket's value format
//	goroutines.go   the request tracker and reused KV-bound goroutines (runners)
//	metrics.go      the Worker's metrics
package owner
