package quota

import (
	"errors"

	"github.com/sluice-dev/sluice/quota/internal/lease"
)

// Errors, besides protocol.ErrInvalid: the request is malformed (the
// caller's fault; answer 400).
var (
	// ErrUnavailable: the partition owner did not answer within the call's
	// budget (timeout, no responders after retries, handoff in progress).
	// A value, never a panic: callers fall back to node-local state.
	ErrUnavailable = errors.New("quota: unavailable")
	// ErrPartitionMismatch: the fleet was created with another partition
	// count; a node configured differently refuses to start.
	ErrPartitionMismatch = lease.ErrPartitionMismatch
)
