// Package owner is the owner side of sluice's quota fleet: a Worker is one
// member of the fleet of partition owners. It takes the leases rendezvous
// hashing gives it, serves each held partition's subject and its member
// subject, and decides hits and reserve/release counters in the owner
// protocol (quota's wire.go); quota.LocalOwner reaches it in process.
// docs/DESIGN.md "Packages and their layers" maps its files.
package owner
