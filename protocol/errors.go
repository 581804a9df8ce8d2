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

// The error codes. Each is answered with one status on each side.
var (
	InvalidRequest       = Error{"invalid_request", 400, 400, "malformed or invalid input; the reason (NATS) or the field and reason (admin API) say what"}
	InvalidTenant        = Error{"invalid_tenant", 400, 0, "the tenant in the path is not a valid name"}
	InvalidSource        = Error{"invalid_source", 400, 0, "the source in the path is not a valid name"}
	VerificationFailed   = Error{"verification_failed", 401, 0, "a bad or missing signature, a timestamp outside the tolerance, or an exact replay"}
	Unauthorized         = Error{"unauthorized", 401, 0, "the admin API without its bearer token"}
	Forbidden            = Error{"forbidden", 403, 0, "the client address is outside the source's ip_allow"}
	NotFound             = Error{"not_found", 404, 0, "no such route, record or receipt"}
	UnknownSource        = Error{"unknown_source", 404, 0, "a tenant or source not in the configuration (and not allowed as unknown)"}
	MethodNotAllowed     = Error{"method_not_allowed", 405, 0, "a method the route or the source does not accept (with Allow)"}
	InFlight             = Error{"in_flight", 409, 0, "the same key is pending on a node: retry after retry_after_ms"}
	RevisionConflict     = Error{"revision_conflict", 409, 0, "an admin write with If-Match of a revision that is not the record's current one"}
	ConsumerExists       = Error{"consumer_exists", 409, 0, "a rewind's consumer name is taken, or a managed consumer created by another request meanwhile"}
	ConsumerNotFound     = Error{"consumer_not_found", 404, 0, "the admin API: no such managed consumer of the tenant"}
	TooManyConsumers     = Error{"too_many_consumers", 409, 0, "the admin API: the tenant has its maximum of managed consumers"}
	DeadLetterNotFound   = Error{"dead_letter_not_found", 404, 0, "the admin API: no such dead letter of the consumer"}
	TenantNotFound       = Error{"tenant_not_found", 404, 0, "the admin API: no such tenant record"}
	SourceNotFound       = Error{"source_not_found", 404, 0, "the admin API: no such source in the tenant's record"}
	SecretNotFound       = Error{"secret_not_found", 404, 0, "the admin API: no such secret of the source"}
	TenantExists         = Error{"tenant_exists", 409, 0, "the admin API: a create of a tenant that has a record"}
	ManagedByFile        = Error{"managed_by_file", 409, 0, "the admin API: a write to a tenant the --config file lists (the file wins)"}
	TooManyTenants       = Error{"too_many_tenants", 409, 0, "the admin API: the tenant records are at their maximum"}
	ClaimLost            = Error{"claim_lost", 0, 409, "a settle or release of a claim the caller no longer holds"}
	PayloadTooLarge      = Error{"payload_too_large", 413, 0, "the body is over the source's limit (limit says it)"}
	UnsupportedMediaType = Error{"unsupported_media_type", 415, 0, "a Content-Type outside the source's content_types"}
	IdempotencyKeyReused = Error{"idempotency_key_reused", 422, 0, "an Idempotency-Key already committed for a request with another body"}
	RateLimited          = Error{"rate_limited", 429, 0, "over the hooks or bytes budget, or a verifying source over its failed checks: retry after retry_after_ms"}
	InternalError        = Error{"internal_error", 0, 500, "anything unexpected"}
	InvalidLimits        = Error{"invalid_limits", 500, 0, "the tenant's configured limits cannot be applied (a configuration error, logged)"}
	StoreUnavailable     = Error{"store_unavailable", 503, 503, "the store could not answer or make the write durable in time: retry"}
	Overloaded           = Error{"overloaded", 503, 0, "the node serves --max-inflight-hooks hooks already: shed at once, nothing read or charged"}
	SourceUnavailable    = Error{"source_unavailable", 503, 0, "a source whose secret this node cannot open (its key is missing from --secrets-key-file)"}
	ServiceStopping      = Error{"service_stopping", 0, 503, "the node is stopping: retry on another"}
)

// Errors is every error code of the contract, in the order of
// docs/PROTOCOL.md's list.
var Errors = []Error{
	InvalidRequest, InvalidTenant, InvalidSource, VerificationFailed, Unauthorized, Forbidden,
	NotFound, UnknownSource, MethodNotAllowed, InFlight, RevisionConflict, ConsumerExists,
	ConsumerNotFound, TooManyConsumers, DeadLetterNotFound,
	TenantNotFound, SourceNotFound, SecretNotFound, TenantExists, ManagedByFile, TooManyTenants, ClaimLost,
	PayloadTooLarge, UnsupportedMediaType, IdempotencyKeyReused, RateLimited, InternalError,
	InvalidLimits, StoreUnavailable, Overloaded, SourceUnavailable, ServiceStopping,
}

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
