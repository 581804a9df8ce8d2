package protocol

import "strings"

// Managed consumers (docs/PROTOCOL.md "Managed consumers"): named durable
// consumers of one tenant's stored hooks that an operator keeps through the
// admin API. Each pushes to a subject of the tenant's redelivery namespace,
// so the tenant's reader role reads every one of them, whatever its name,
// with one subscribe permission, and acks what it received (the role's
// allow_responses): NATS permissions match whole tokens only, so a
// permission cannot name "the consumers whose name starts with acme".

// ConsumerSep joins a tenant's token and a managed consumer's name in the
// consumer's JetStream name. A tenant token holds only [A-Za-z0-9_=-]
// (EncodeToken), so the first '~' ends it: no two (tenant, name) pairs give
// one JetStream name.
const ConsumerSep = "~"

// MaxConsumerName bounds a managed consumer's name.
const MaxConsumerName = 64

// ValidConsumerName reports whether name is 1..MaxConsumerName bytes of
// [A-Za-z0-9_-] (one subject token, no wildcard, no path).
func ValidConsumerName(name string) bool {
	if name == "" || len(name) > MaxConsumerName {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !Plain(name[i]) {
			return false
		}
	}
	return true
}

// ManagedConsumer is the JetStream name of tenant's managed consumer name:
// "<tenant token>~<name>".
func ManagedConsumer(tenant, name string) string {
	return TenantToken(tenant) + ConsumerSep + name
}

// ManagedConsumerName splits a JetStream consumer name made by
// ManagedConsumer into the tenant's token and the name (ok false for any
// other consumer).
func ManagedConsumerName(consumer string) (token, name string, ok bool) {
	token, name, ok = strings.Cut(consumer, ConsumerSep)
	return token, name, ok && token != "" && ValidConsumerName(name)
}

// ConsumerDeliverSubject is the subject tenant's managed consumer name
// pushes to: "<prefix>.redeliver.<tenant token>.consumer.<name>".
func ConsumerDeliverSubject(prefix, tenant, name string) string {
	return prefix + ".redeliver." + TenantToken(tenant) + ".consumer." + name
}

// DeadLetterStream keeps the dead letters of every tenant's managed
// consumers, each on DeadLetterSubject.
const DeadLetterStream = "DEADLETTER"

// DeadLetterSubject is where tenant's managed consumer name's dead letters
// are: "<prefix>.deadletter.<tenant token>.<name>".
func DeadLetterSubject(prefix, tenant, name string) string {
	return prefix + ".deadletter." + TenantToken(tenant) + "." + name
}

// DeadLetterReader is the durable consumer of DeadLetterStream through
// which tenant's readers (the consumer role) read its dead letters, and
// only its: named as its tenant's token, filtered to
// DeadLetterReaderFilter.
func DeadLetterReader(tenant string) string { return TenantToken(tenant) }

// DeadLetterReaderFilter is the filter of tenant's DeadLetterReader:
// "<prefix>.deadletter.<tenant token>.>".
func DeadLetterReaderFilter(prefix, tenant string) string {
	return prefix + ".deadletter." + TenantToken(tenant) + ".>"
}
