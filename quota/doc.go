// Package quota is the public face of sluice's fleet-wide GCRA rate limits
// and reserve/release counters: the owner protocol's wire format,
// partitioning, the Router (each call to its partition's owner, with
// coalescing) and the Fleet (a Router with a node-local fallback). Types and checks are package protocol's; the
// owners are quota/owner's Worker. docs/DESIGN.md "Packages and their
// layers" maps its files.
package quota
