// Package events names sluice's event subjects and their JSON payloads (the
// public contract: Subjects, SettleEvent, Lifecycle), publishes lifecycle
// events, applies settle/release events (the Settler), and reports claim
// expiry from the claims bucket's markers (the ExpiryWatcher).
package events

import (
	"strings"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
)

// StreamName is the name of the stream that captures the settle and release
// subjects of prefix: the prefix with '.' replaced by '_' (like
// kvstore.BucketNames), then "_events" ("sluice" -> "sluice_events"). Case is
// kept so that two prefixes differing only in case never share a stream.
func StreamName(prefix string) string {
	return strings.ReplaceAll(prefix, ".", "_") + "_events"
}

// eventID is the claim a settle or release event names.
func eventID(ev protocol.SettleEvent) claims.ID {
	return claims.ID{Tenant: ev.Tenant, Source: ev.Source, Key: ev.Key}
}
