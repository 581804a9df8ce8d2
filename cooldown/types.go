package cooldown

import (
	"errors"
)

// Errors returned by this package. Every error wraps at most one of them
// or protocol.ErrInvalid (plus its cause). protocol.ErrInvalid is returned
// for malformed arguments: an account or backend outside
// 1..protocol.MaxNameBytes bytes, a backends list outside
// 1..protocol.MaxBackends entries, a non-finite percent, a time outside
// 0..protocol.MaxTimeMs … The message names the field. It is the caller's
// fault: answer 400, never retry.
var (
	// ErrUnavailable is returned by Record and Penalize when the shared store
	// did not take the write within the call's budget (timeout, no
	// responders, closed connection, or a write contended beyond the retry
	// bound). The write has still landed in the node-local store. Load never
	// returns it: it answers from node-local state instead.
	ErrUnavailable = errors.New("cooldown: store unavailable")
)
