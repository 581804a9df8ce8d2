package client

import (
	"errors"
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// Errors. Every error a Client method returns wraps exactly one of them
// (plus its cause: a *ServiceError, a nats or context error …).
var (
	// protocol.ErrInvalidOption is wrapped by New's error for a nil connection or an
	// Option given a bad value.
	errInvalidOption = fmt.Errorf("client: %w", protocol.ErrInvalidOption)
	// ErrInvalid: the service answered 400 (the *ServiceError's Reason says
	// what is wrong) or the client could not send the request at all (not
	// encodable, over the max payload, an invalid settle event). The
	// caller's fault: never retry it unchanged.
	ErrInvalid = errors.New("client: invalid request")
	// ErrClaimLost: Settle, SettleTTL or ReleaseClaim of a claim the caller
	// no longer holds (a stale revision or another hook id): 409
	// "claim_lost"; errors.Is(err, protocol.ErrClaimLost) too. Retrying
	// cannot change it.
	ErrClaimLost = fmt.Errorf("client: %w", protocol.ErrClaimLost)
	// protocol.ErrUnavailable: no answer in time: a 503, no responders, the deadline
	// passed or the context was cancelled (then also wrapping its error),
	// or the connection is closed or draining. Whether a write was applied
	// is unknown; callers may retry or fall back.
	errUnavailable = fmt.Errorf("client: service %w", protocol.ErrUnavailable)
	// ErrInternal: the service answered 500 "internal_error" (a bug it
	// logged) or an error code this client does not know.
	ErrInternal = errors.New("client: service error")
	// ErrBadReply: the service answered something that is not the
	// contract's reply (a version mismatch, or something else answering on
	// the subject).
	ErrBadReply = errors.New("client: unreadable reply")
)

// ServiceError is an error answered with micro's error headers
// (Nats-Service-Error-Code, Nats-Service-Error; the codes and statuses are
// protocol.Errors). Get it with errors.As; it unwraps to the sentinel of
// its code: 400 ErrInvalid, 409 ErrClaimLost, 503 protocol.ErrUnavailable, anything
// else ErrInternal.
type ServiceError struct {
	// Subject is the request subject ("sluice.v1.quota.reserve").
	Subject string
	// Code is Nats-Service-Error-Code (400, 409, 503, 500 …; 0 when the
	// header was not a number).
	Code int
	// Reason is Nats-Service-Error: "invalid_request: <what is wrong>",
	// "claim_lost", "store_unavailable", "service_stopping",
	// "internal_error".
	Reason string
}

// Error says which sentinel, which subject, and what the service answered.
func (e *ServiceError) Error() string {
	return fmt.Sprintf("%v: %s answered %d %s", e.Unwrap(), e.Subject, e.Code, e.Reason)
}

// Unwrap is the sentinel of the error code.
func (e *ServiceError) Unwrap() error {
	switch e.Code {
	case protocol.InvalidRequest.NATS:
		return ErrInvalid
	case protocol.ClaimLost.NATS:
		return ErrClaimLost
	case protocol.StoreUnavailable.NATS, protocol.ServiceStopping.NATS:
		return errUnavailable
	}
	return ErrInternal
}
