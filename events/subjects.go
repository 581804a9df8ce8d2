// Package events publishes lifecycle events, applies settle/release events
// (the Settler), and reports claim expiry from the claims bucket's markers
// (the ExpiryWatcher). The event subjects and payloads, the public contract,
// are package protocol's (protocol.Subjects, protocol.SettleEvent,
// protocol.Lifecycle); this package holds only its stream's name.
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
