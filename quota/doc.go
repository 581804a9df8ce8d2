// Package quota is the public face of sluice's fleet-wide GCRA rate
// limits and reserve/release counters: the owner protocol's wire format,
// partitioning, the routing Client (with coalescing) and the Fleet (a
// Client with a node-local fallback); the request and reply types and
// their checks are package protocol's. The owners that serve the partitions are
// quota/owner's Worker. docs/DESIGN.md tells the path of a hit through the
// packages; docs/PROTOCOL.md is the wire contract.
//
// Map of the files, in the order a hit reads them:
//
//	options.go      the options of NewClient and NewFleet, and those owner.New shares with them
//	partition.go    Partition (tenant -> partition), the owner subjects, counter keys
//	client.go       the errors; Client: validation, routing, retries; LocalOwner (the in-process path)
//	settle.go       Client.Settle: the one settle path, in process or in a frame to the owner
//	coalesce.go     the Client's side of coalescing: which hits go in a frame, their answers
//	frame.go        the quota side of the batch frame: item validation, items from HitRequests, result names
//	wire.go         the owner protocol's JSON form (OwnerRequest), wire number conversions
//	answer.go       a claim's outcome as a hit's answer, an answer as a HitReply (owner and Fleet)
//	fleet.go        Fleet: the node-local fallback (local limiter, claims in the fleet's KV store)
//	buckets.go      the leases and counts buckets
//
//	owner              the partition owners (Worker): leases, tenures, frames, decisions, state
//	internal/frame     the batch frame codec: pure, fuzzed
//	internal/lease     heartbeats, the watched view, the assignment, the lease loop
//	internal/coalesce  lanes and frames in flight: concurrent hits for one owner in one frame
//	internal/settings  the settings the shared options write (quota's and the owner's constructors read them)
package quota
