// Package quota is the public face of sluice's fleet-wide GCRA rate
// limits and reserve/release counters: the owner protocol's wire format,
// partitioning, the routing Client (with coalescing) and the Fleet (a
// Client with a node-local fallback); the request and reply types and
// their checks are package protocol's. The owners that serve the partitions are
// quota/owner's Worker. docs/DESIGN.md tells the path of a hit through the
// packages; docs/PROTOCOL.md is the wire contract.
//
// docs/DESIGN.md "Packages and their layers" maps quota's files and
// internal packages.
package quota
