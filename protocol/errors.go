package protocol

import (
	"encoding/json"
	"errors"
	"net/http"
)

// Sentinels of the contract's Go errors.
var (
	// ErrInvalid is wrapped by every check of this package that fails,
	// and by every error of sluice's packages (quota, claims, cooldown …)
	// for a malformed or invalid request: answered 400 invalid_request;
	// the caller's fault, never retried.
	ErrInvalid = errors.New("invalid request")
	// ErrClaimLost is wrapped by the error of a settle or release of a
	// claim the caller no longer holds (answered 409 claim_lost): the
	// claims stores', the Go clients'.
	ErrClaimLost = errors.New("claim lost")
	// ErrUnavailable is the one unavailable sentinel: every sluice
	// package's unavailable error (claims, quota, cooldown, kvstore,
	// client: "claims: store unavailable: …") wraps it, so
	// errors.Is(err, ErrUnavailable) tells any of them: the store or
	// service could not answer in time (503 store_unavailable), and a
	// retry may succeed.
	ErrUnavailable = errors.New("unavailable")
	// ErrInvalidOption is the one invalid-option sentinel: every sluice
	// package's constructor (claims, quota, cooldown, events, gcra,
	// tenants, forward, durability, client, testkit) refuses a bad option
	// with an error wrapping it ("claims: invalid option: …").
	ErrInvalidOption = errors.New("invalid option")
)

// Error is one error code of the contract: Code is the "error" member of
// an HTTP error body ({"error":"<code>",…}) and the reason of a NATS error
// reply (the micro header Nats-Service-Error: "<code>[: detail]"); HTTP is
// the status it is answered with over HTTP and NATS the
// Nats-Service-Error-Code over NATS (0: not answered on that side).
type Error struct {
	Code    string
	HTTP    int
	NATS    int
	Meaning string
}

// Errors is every error code of the contract, in the order of
// docs/PROTOCOL.md's list (TestProtocolDocListsTheErrors holds the doc to
// it): the codes declared below, in their order, each declared once.
// newError adds each: the table is its one source.
var Errors []Error

// newError is an error code of the table (Errors).
func newError(code string, http, nats int, meaning string) Error {
	e := Error{Code: code, HTTP: http, NATS: nats, Meaning: meaning}
	Errors = append(Errors, e)
	return e
}

// The error codes. Each is answered with one status on each side.
var (
	InvalidRequest       = newError("invalid_request", 400, 400, "malformed or invalid input; the reason (NATS) or the field and reason (admin API) say what")
	InvalidTenant        = newError("invalid_tenant", 400, 0, "the tenant in the path is not a valid name")
	InvalidSource        = newError("invalid_source", 400, 0, "the source in the path is not a valid name")
	VerificationFailed   = newError("verification_failed", 401, 0, "a bad or missing signature, a timestamp outside the tolerance, or an exact replay")
	Unauthorized         = newError("unauthorized", 401, 0, "the admin API without its bearer token")
	Forbidden            = newError("forbidden", 403, 0, "the client address is outside the source's ip_allow")
	NotFound             = newError("not_found", 404, 0, "no such route, record or receipt")
	UnknownSource        = newError("unknown_source", 404, 0, "a tenant or source not in the configuration (and not allowed as unknown)")
	UnknownTenant        = newError("unknown_tenant", 404, 0, "the admin API: a managed consumer of a tenant this node does not know (not listed, no record, admission not open)")
	MethodNotAllowed     = newError("method_not_allowed", 405, 0, "a method the route or the source does not accept (with Allow)")
	InFlight             = newError("in_flight", 409, 0, "the same key is pending on a node: retry after retry_after_ms")
	RevisionConflict     = newError("revision_conflict", 409, 0, "an admin write with If-Match of a revision that is not the record's current one")
	ConsumerExists       = newError("consumer_exists", 409, 0, "a rewind's consumer name is taken, or a managed consumer created by another request meanwhile")
	ConsumerNotFound     = newError("consumer_not_found", 404, 0, "the admin API: no such managed consumer of the tenant")
	TooManyConsumers     = newError("too_many_consumers", 409, 0, "the admin API: the tenant has its maximum of managed consumers")
	DeadLetterNotFound   = newError("dead_letter_not_found", 404, 0, "the admin API: no such dead letter of the consumer")
	TenantNotFound       = newError("tenant_not_found", 404, 0, "the admin API: no such tenant record")
	SourceNotFound       = newError("source_not_found", 404, 0, "the admin API: no such source in the tenant's record")
	SecretNotFound       = newError("secret_not_found", 404, 0, "the admin API: no such secret of the source")
	TenantExists         = newError("tenant_exists", 409, 0, "the admin API: a create of a tenant that has a record")
	ManagedByFile        = newError("managed_by_file", 409, 0, "the admin API: a write to a tenant the --config file lists (the file wins)")
	TooManyTenants       = newError("too_many_tenants", 409, 0, "the admin API: the tenant records are at their maximum")
	ClaimLost            = newError("claim_lost", 0, 409, "a settle or release of a claim the caller no longer holds")
	PayloadTooLarge      = newError("payload_too_large", 413, 0, "the body is over the source's limit (limit says it)")
	UnsupportedMediaType = newError("unsupported_media_type", 415, 0, "a Content-Type outside the source's content_types")
	IdempotencyKeyReused = newError("idempotency_key_reused", 422, 0, "an Idempotency-Key already committed for a request with another body")
	RateLimited          = newError("rate_limited", 429, 0, "over the hooks or bytes budget, or a verifying source over its failed checks: retry after retry_after_ms")
	InternalError        = newError("internal_error", 0, 500, "anything unexpected")
	InvalidLimits        = newError("invalid_limits", 500, 0, "the tenant's configured limits cannot be applied (a configuration error, logged)")
	StoreUnavailable     = newError("store_unavailable", 503, 503, "the store could not answer or make the write durable in time: retry")
	Overloaded           = newError("overloaded", 503, 0, "the node serves --max-inflight-hooks hooks already: shed at once, nothing read or charged")
	SourceUnavailable    = newError("source_unavailable", 503, 0, "a source whose secret this node cannot open (its key is missing from --secrets-key-file)")
	ServiceStopping      = newError("service_stopping", 0, 503, "the node is stopping: retry on another")
	// NotOwner is answered between nodes only, on the quota owners'
	// partition and member subjects (not a public endpoint).
	NotOwner = newError("not_owner", 0, 503, "between nodes only (quota owner subjects): the receiver no longer serves the partition; the sender retries the partition subject")
)

// Write answers e over HTTP: its status and the JSON body
// {"error":"<code>"} with extra's members (retry_after_ms, reason, field
// …).
func (e Error) Write(w http.ResponseWriter, extra map[string]any) {
	body := make(map[string]any, len(extra)+1)
	for k, v := range extra {
		body[k] = v
	}
	body["error"] = e.Code
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.HTTP)
	_ = json.NewEncoder(w).Encode(body)
}
