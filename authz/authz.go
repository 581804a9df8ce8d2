// Package authz is sluice's trust model on NATS: the roles a NATS user can
// have (node, operator, service, consumer: docs/SECURITY.md "NATS roles") and
// the subject permissions each needs, used both by the embedded server and by
// `edge nats-authz`. The server enforces them; the service adds one check it
// cannot make: on <prefix>.v1.t.<tenant>.<endpoint> it refuses a body naming
// another tenant (service.scope). A consumer never creates its own durable:
// JetStream does not check a push consumer's deliver subject against its
// creator's permissions. Every role but node receives replies only on
// _INBOX.<user>., so no caller can read another's replies.
package authz

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// Roles.
const (
	RoleNode     = "node"
	RoleOperator = "operator"
	RoleService  = "service"
	RoleConsumer = "consumer"
)

// Roles lists the roles in a stable order.
func Roles() []string { return []string{RoleNode, RoleOperator, RoleService, RoleConsumer} }

// ErrInvalid wraps every error of this package.
var ErrInvalid = errors.New("authz: invalid")

// Permissions are the subjects a user may publish to and subscribe to
// (allow lists; everything else is denied by the server).
type Permissions struct {
	Publish   []string
	Subscribe []string
	// Responses, when set, lets the user also publish one answer to the
	// reply subject of each message it received, within Expires
	// (nats-server's allow_responses): how the consumer role acks the
	// hooks its tenants' managed consumers push to it.
	Responses *Responses
}

// Responses is nats-server's allow_responses: at most Max answers to a
// received message's reply subject, within Expires of its delivery.
type Responses struct {
	Max     int
	Expires time.Duration
}

// ConsumerResponses is the consumer role's allow_responses: one answer
// (ack, nak or term) to each pushed hook, within MaxAckWait. One answer
// keeps the server's table of open reply subjects to the unanswered
// deliveries (it drops an answered one at its next prune).
func ConsumerResponses() *Responses { return &Responses{Max: 1, Expires: MaxAckWait} }

// MaxAckWait is the longest ack wait of a managed consumer: a reader
// answers a delivery within it, or the server no longer lets it (the
// hook is delivered again when the ack wait ends).
const MaxAckWait = time.Hour

// RedeliverPrefix is the subject namespace of tenant's redeliveries:
// <prefix>.redeliver.<token>. A rewind pushes a tenant's stored hooks only
// to this subject or below it (hooks.ValidDeliverSubject), never to a
// subject another tenant or sluice itself reads; the consumer role may
// subscribe to it.
func RedeliverPrefix(prefix, tenant string) string {
	return prefix + ".redeliver." + protocol.TenantToken(tenant)
}

// InboxPrefix is the reply inbox prefix of user.
func InboxPrefix(user string) string { return "_INBOX." + user }

// ForShards returns the permissions of a user named user with role in a
// fleet with subject prefix, hooks stream and shards shards (--partitions
// P/S), confined to tenants (service and consumer: required; others: none
// allowed). A consumer reads each of its tenants in that tenant's shard's
// stream (protocol.ShardName(stream, protocol.Shard(tenant, shards));
// stream is shard 0's), and no other.
func ForShards(role, user, prefix, stream string, shards int, tenants []string) (Permissions, error) {
	if user == "" || strings.ContainsAny(user, ".*> \t\r\n") {
		return Permissions{}, fmt.Errorf("%w: user %q must be one subject token", ErrInvalid, user)
	}
	scoped := role == RoleService || role == RoleConsumer
	switch {
	case scoped && len(tenants) == 0:
		return Permissions{}, fmt.Errorf("%w: role %s needs tenants", ErrInvalid, role)
	case !scoped && len(tenants) > 0:
		return Permissions{}, fmt.Errorf("%w: role %s acts for every tenant; tenants are for service and consumer", ErrInvalid, role)
	}
	for _, t := range tenants {
		if t == "" {
			return Permissions{}, fmt.Errorf("%w: empty tenant", ErrInvalid)
		}
	}
	inbox := InboxPrefix(user) + ".>"
	var p Permissions
	switch role {
	case RoleNode:
		p = Permissions{Publish: []string{">"}, Subscribe: []string{">"}}
	case RoleOperator:
		p = Permissions{
			Publish:   []string{prefix + ".v1.>", "$SRV.>"},
			Subscribe: []string{inbox, prefix + ".v1.events.>"},
		}
	case RoleService:
		p.Subscribe = []string{inbox}
		for _, t := range tenants {
			p.Publish = append(p.Publish, protocol.ScopedPrefix(prefix, protocol.TenantToken(t))+">")
		}
	case RoleConsumer:
		p.Subscribe = []string{inbox}
		// Acks of what the tenants' managed consumers push (to the
		// redelivery namespace below), whatever the consumers' names.
		p.Responses = ConsumerResponses()
		for _, t := range tenants {
			tok := protocol.TenantToken(t)
			stream := protocol.ShardName(stream, protocol.Shard(t, shards))
			// The tenant's lifecycle events (protocol.Subjects).
			p.Subscribe = append(p.Subscribe,
				prefix+".v1.events.claim.*."+tok, prefix+".v1.events.hook.stored."+tok+".*", prefix+".v1.events.limit.denied."+tok,
				RedeliverPrefix(prefix, t), RedeliverPrefix(prefix, t)+".>")
			p.Publish = append(p.Publish,
				// Read, pull and ack only the tenant's own durable consumer,
				// which an operator creates (the rewind admin call). Never
				// create: the server does not check a push consumer's
				// deliver subject against its creator's permissions, so a
				// consumer created here could deliver this tenant's hooks
				// (bodies any sender writes) to any subject of the account.
				"$JS.API.CONSUMER.INFO."+stream+"."+tok,
				"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+tok,
				"$JS.ACK."+stream+"."+tok+".>",
				// The tenant's dead letters: the consumer of DEADLETTER
				// named after the tenant, filtered to its letters, which
				// sluice creates with the tenant's first managed consumer.
				"$JS.API.CONSUMER.INFO."+protocol.DeadLetterStream+"."+protocol.DeadLetterReader(t),
				"$JS.API.CONSUMER.MSG.NEXT."+protocol.DeadLetterStream+"."+protocol.DeadLetterReader(t),
				"$JS.ACK."+protocol.DeadLetterStream+"."+protocol.DeadLetterReader(t)+".>",
			)
		}
	default:
		return Permissions{}, fmt.Errorf("%w: unknown role %q (want %s)", ErrInvalid, role, strings.Join(Roles(), ", "))
	}
	sort.Strings(p.Publish)
	return p, nil
}

// ConfigBlock returns a nats-server configuration authorization block for
// users (name → the user's line, e.g. `user: "svc", password: $SVC_PASSWORD` or
// `nkey: UA…`) with perms, for an external deployment.
func ConfigBlock(entries []Entry) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "    # %s (role %s", e.User, e.Role)
		if len(e.Tenants) > 0 {
			fmt.Fprintf(&b, ", tenants %s", strings.Join(e.Tenants, ","))
		}
		fmt.Fprintf(&b, "); clients use nats.CustomInboxPrefix(%q)\n", InboxPrefix(e.User))
		fmt.Fprintf(&b, "    {\n      %s\n      permissions: {\n", e.Credential)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", quoteList(e.Perms.Publish))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", quoteList(e.Perms.Subscribe))
		if r := e.Perms.Responses; r != nil {
			fmt.Fprintf(&b, "        allow_responses: { max: %d, expires: %q }\n", r.Max, r.Expires.String())
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// Entry is one user of ConfigBlock.
type Entry struct {
	User, Role string
	Tenants    []string
	// Credential is the user's credential line: `user: "svc", password:
	// "$SVC_PASS"` or `nkey: "UA…"`.
	Credential string
	Perms      Permissions
}

// PasswordEnv is the environment variable that holds user's password in
// the block `edge nats-authz` prints: ACME_SVC_PASSWORD for acme-svc.
func PasswordEnv(user string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(user)) + "_PASSWORD"
}

// PasswordCredential is the credential line of user with its password
// read from PasswordEnv(user) when nats-server loads the configuration. The
// reference is unquoted: nats-server resolves $VAR only outside quotes, and
// "$VAR" would be the password, literally.
func PasswordCredential(user string) string {
	return fmt.Sprintf("user: %q, password: $%s", user, PasswordEnv(user))
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
