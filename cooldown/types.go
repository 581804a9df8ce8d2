package cooldown

import (
	"errors"

	"github.com/sluice-dev/sluice/protocol"
)

// Errors returned by this package. Every error wraps at most one of them
// (plus its cause).
var (
	// ErrInvalid is returned for malformed arguments: an account or backend
	// outside 1..MaxNameBytes bytes, a backends list outside 1..MaxBackends
	// entries, a non-finite percent, a time outside 0..MaxTimeMs … The
	// message names the field. It is the caller's fault: answer 400, never
	// retry.
	// It is protocol.ErrInvalid, which the checks of the requests wrap.
	ErrInvalid = protocol.ErrInvalid
	// ErrUnavailable is returned by Record and Penalize when the shared store
	// did not take the write within the call's budget (timeout, no
	// responders, closed connection, or a write contended beyond the retry
	// bound). The write has still landed in the node-local store. Load never
	// returns it: it answers from node-local state instead.
	ErrUnavailable = errors.New("cooldown: store unavailable")
)
