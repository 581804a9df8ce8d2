// Package owner is the owner side of sluice's quota fleet: a Worker is one
// member of the fleet of partition owners. It takes the leases that
// rendezvous hashing over the live members gives it (quota/internal/lease),
// serves each held partition's subject and its own member subject, decides
// hits (GCRA charges, then the dedupe claim) and reserve/release counters,
// and answers in the owner protocol of quota's wire.go. A quota.Client in
// the same process reaches it without NATS through quota.LocalOwner.
// docs/DESIGN.md "Packages and their layers" maps its files.
package owner
