package quota

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The owner protocol: JSON requests on partitionSubject(prefix, n), answered
// by the worker holding partition n's lease. It is internal to sluice
// (clients in other languages use the sluice.v1.quota.* service) but stable
// enough to mix versions during a rolling upgrade: unknown fields are
// ignored, an unknown op is a 400.
//
//	{"op":"hit","timeout_ms":N,"hit":{…HitRequest}}          -> HitReply
//	{"op":"reset","reset":{"tenant":"t"}}                      -> {"ok":true}
//	{"op":"reserve","reserve":{…ReserveRequest}}               -> ReserveReply
//	{"op":"release"|"count","counter":{…CounterRequest}}       -> CountReply
//
// timeout_ms is what is left of the caller's budget; the owner bounds its KV
// calls for the request by it. Errors carry the micro headers
// Nats-Service-Error-Code (400 or 503) and Nats-Service-Error (the reason)
// and an empty body. The reason "not_owner" (503) means the receiver is
// handing the partition over: the client retries like on no-responders.
//
// "op":"batch" is the binary batch frame of quota/internal/frame (first byte 0xFA, so
// never mistaken for JSON): several hits, possibly of several partitions
// the receiving worker serves, answered item by item in one reply (plus
// one for the items that waited on a claim). Owners also serve frames on
// their member subject (memberSubject), which their replies advertise.
// Clients coalesce concurrent hits into frames (internal/coalesce) and send JSON
// to an owner that answers a frame with an error header (a version before
// frames); owners answer JSON as before.
const (
	opHit     = "hit"
	opReset   = "reset"
	opReserve = "reserve"
	opRelease = "release"
	opCount   = "count"
)

// reasonNotOwner is the 503 reason of a receiver that no longer holds (or
// is releasing) the partition.
const reasonNotOwner = frame.ReasonNotOwner

type ownerRequest struct {
	Op        string          `json:"op"`
	TimeoutMs int64           `json:"timeout_ms,omitempty"`
	Hit       *HitRequest     `json:"hit,omitempty"`
	Reset     *ResetRequest   `json:"reset,omitempty"`
	Reserve   *ReserveRequest `json:"reserve,omitempty"`
	Counter   *CounterRequest `json:"counter,omitempty"`
}

// routingKey is the string that picks the request's partition.
func (r *ownerRequest) routingKey() (string, error) {
	switch r.Op {
	case opHit:
		if r.Hit != nil {
			return r.Hit.Tenant(), nil
		}
	case opReset:
		if r.Reset != nil {
			return r.Reset.Tenant, nil
		}
	case opReserve:
		if r.Reserve != nil {
			return r.Reserve.Principal, nil
		}
	case opRelease, opCount:
		if r.Counter != nil {
			return r.Counter.Principal, nil
		}
	default:
		return "", fmt.Errorf("%w: unknown op %q", ErrInvalid, r.Op)
	}
	return "", fmt.Errorf("%w: op %q without its body", ErrInvalid, r.Op)
}

// validate checks the body of r (the same checks the client makes).
func (r *ownerRequest) validate() error {
	if _, err := r.routingKey(); err != nil {
		return err
	}
	switch r.Op {
	case opHit:
		return r.Hit.Validate()
	case opReset:
		return r.Reset.Validate()
	case opReserve:
		return r.Reserve.Validate()
	default:
		return r.Counter.Validate()
	}
}

// okReply is the reply of reset.
type okReply struct {
	OK bool `json:"ok"`
}

// errorMsg builds an error reply with the micro error headers.
func errorMsg(code int, reason string) *nats.Msg {
	m := &nats.Msg{Header: nats.Header{}}
	m.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(code))
	m.Header.Set(micro.ErrorHeader, reason)
	return m
}

func respondJSON(m *nats.Msg, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		_ = m.RespondMsg(errorMsg(503, "encode reply: "+err.Error()))
		return
	}
	_ = m.Respond(data)
}

func respondError(m *nats.Msg, code int, reason string) {
	if m.Reply == "" {
		return
	}
	_ = m.RespondMsg(errorMsg(code, reason))
}

// msToDuration converts a wire millisecond count (0: def).
func msToDuration(ms int64, def time.Duration) time.Duration {
	if ms <= 0 {
		return def
	}
	if ms > int64(claims.MaxTTL/time.Millisecond) {
		return claims.MaxTTL
	}
	return time.Duration(ms) * time.Millisecond
}

func itoa(n int) string { return strconv.Itoa(n) }

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func parseInt64(b []byte) (int64, error) { return strconv.ParseInt(string(b), 10, 64) }
