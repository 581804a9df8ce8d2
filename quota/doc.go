// Package quota serves fleet-wide GCRA rate limits and reserve/release
// counters from partition-owning workers over NATS request/reply, and gives
// callers a routing client with a node-local fallback.
//
// The public face is Worker (an owner of partitions), Client (routes each
// request to its partition's owner), Fleet (a Client with a node-local
// fallback), the request and reply types, and the options. docs/DESIGN.md
// tells the path of a hit through the packages; docs/PROTOCOL.md is the
// wire contract.
//
// Map of the files:
//
//	types.go        requests, replies, results, errors
//	validate.go     every check of a request and its bounds (MaxCharges, MaxKindBytes, MaxNameBytes)
//	options.go      Option and the defaults
//	partition.go    Partition (tenant -> partition), the owner subjects, counter keys
//	buckets.go      the leases and counts buckets
//	wire.go         the owner protocol's JSON form, error replies, wire number conversions
//	frame.go        the quota side of the batch frame: items as HitRequests, result names
//	client.go       Client: validation, routing, retries, JSON fallback
//	coalesce.go     the Client's side of coalescing: which hits go in a frame, their answers
//	fleet.go        Fleet: the node-local fallback (local limiter, claims in the fleet's KV store)
//	worker.go       Worker: wiring, Start and Stop
//	goroutines.go   the Worker's request tracker and reused KV-bound goroutines (runners)
//	owner.go        the Worker as the lease loop's owner (acquired, lost, released) and its shutdown
//	tenure.go       one held partition: its subscription, JSON requests, counters, refunds
//	serve_frame.go  serving a batch frame as a sequence of steps; its claims' creates pipelined
//	local.go        the local owner: a hit for a partition this process's Worker serves, without NATS
//	decide.go       the decision core of a hit (charges, then the claim write) and its answer
//	state.go        a partition's GCRA buckets
//	metrics.go      the Worker's metrics
//
//	internal/frame  the batch frame codec: pure, fuzzed
//	internal/lease  heartbeats, the watched view, the assignment, the lease loop
//	internal/coalesce  lanes and frames in flight: concurrent hits for one owner in one frame
package quota
