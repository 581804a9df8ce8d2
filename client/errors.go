package client

import (
	"errors"
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// Errors. Every error a Client method returns wraps exactly one of them
// (plus its cause: a *ServiceError, a nats or context error …).
var (
	// ErrInvalidOption is wrapped by New's error for a nil connection or an
	// Option given a bad value.
	ErrInvalidOption = errors.New("client: invalid option")
	// ErrInvalid: the request is malformed or invalid — the service
	// answered 400 (the *ServiceError's Reason says what is wrong:
	// "invalid_request: max must be >= 1, got 0"), or the client could not
	// send it at all (not encodable as JSON, over the server's max payload,
	// a settle event that fails protocol.SettleEvent.Validate). The caller's
	// fault: never retry it unchanged.
	ErrInvalid = errors.New("client: invalid request")
	// ErrClaimLost: Settle, SettleTTL or ReleaseClaim of a claim the caller
	// no longer holds — its revision is stale (it expired, was released,
	// settled or taken by another claimer) or another hook id holds it; the
	// service answered 409 "claim_lost". errors.Is(err,
	// protocol.ErrClaimLost) (which is protocol.ErrClaimLost) is true as well.
	// Retrying cannot change it.
	ErrClaimLost = fmt.Errorf("client: %w", protocol.ErrClaimLost)
	// ErrUnavailable: the service did not give an answer in time. It
	// answered 503 (its store did not answer within its budget, it was
	// busy, or it is stopping), nobody answers the subject (no responders:
	// no instance runs, or none with that endpoint), the call's deadline
	// passed or its context was cancelled (the error then also wraps
	// context.DeadlineExceeded or context.Canceled), or the connection is
	// closed or draining. Nothing is known about whether a write was
	// applied; callers may retry or fall back.
	ErrUnavailable = errors.New("client: service unavailable")
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
// its code: 400 ErrInvalid, 409 ErrClaimLost, 503 ErrUnavailable, anything
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
		return ErrUnavailable
	}
	return ErrInternal
}
