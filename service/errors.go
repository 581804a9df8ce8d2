package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/protocol"
)

var (
	// errStopping: the request arrived after Stop.
	errStopping = errors.New(protocol.ServiceStopping.Code)
	// errBusy: no free in-flight slot before the request's deadline.
	errBusy = errors.New("service: busy")
)

// Outcomes of a request (the metrics' outcome label).
const (
	outcomeOK          = "ok"
	outcomeInvalid     = "invalid"
	outcomeLost        = "claim_lost"
	outcomeUnavailable = "unavailable"
	outcomeError       = "error"
)

// invalidSentinels are the errors answered 400, with the text up to and
// including their message cut from the reason.
var invalidSentinels = []error{errInvalid, protocol.ErrInvalid}

// unavailableSentinels are the errors answered 503 "store_unavailable":
// protocol.ErrUnavailable is every package's ErrUnavailable (quota,
// claims, cooldown, kvstore).
var unavailableSentinels = []error{
	errBusy,
	protocol.ErrUnavailable,
	context.DeadlineExceeded, context.Canceled,
	nats.ErrTimeout, nats.ErrNoResponders, nats.ErrConnectionClosed, nats.ErrConnectionDraining, nats.ErrDisconnected,
}

// classify maps a handler's error to the micro error code, the reason
// header and the metrics outcome.
func classify(err error) (code, reason, outcome string) {
	reply := func(e protocol.Error, reason, outcome string) (string, string, string) {
		return strconv.Itoa(e.NATS), reason, outcome
	}
	switch {
	case errors.Is(err, errStopping):
		return reply(protocol.ServiceStopping, protocol.ServiceStopping.Code, outcomeUnavailable)
	case errors.Is(err, protocol.ErrClaimLost):
		return reply(protocol.ClaimLost, protocol.ClaimLost.Code, outcomeLost)
	}
	for _, s := range invalidSentinels {
		if errors.Is(err, s) {
			return reply(protocol.InvalidRequest, protocol.InvalidRequest.Code+": "+detail(err.Error(), s), outcomeInvalid)
		}
	}
	for _, s := range unavailableSentinels {
		if errors.Is(err, s) {
			return reply(protocol.StoreUnavailable, protocol.StoreUnavailable.Code, outcomeUnavailable)
		}
	}
	return reply(protocol.InternalError, protocol.InternalError.Code, outcomeError)
}

// maxReasonBytes bounds the detail of a 400 reason (a header value).
const maxReasonBytes = 400

// detail is what an invalid-request error says after the text of its
// sentinel, and of every other invalid sentinel it wraps, cut out
// ("invalid request: claim: invalid request: key must not be empty" ->
// "claim: key must not be empty"), made safe for a header value: one
// line, at most maxReasonBytes bytes.
func detail(msg string, sentinel error) string {
	for _, s := range append([]error{sentinel}, invalidSentinels...) {
		if i := strings.Index(msg, s.Error()+": "); i >= 0 {
			msg = msg[:i] + msg[i+len(s.Error())+2:]
		}
	}
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	if len(msg) > maxReasonBytes {
		msg = strings.ToValidUTF8(msg[:maxReasonBytes], "") + "…"
	}
	if msg == "" {
		msg = "invalid"
	}
	return msg
}

// marshalReply encodes a reply value.
func marshalReply(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("service: encode reply: %w", err)
	}
	return b, nil
}
