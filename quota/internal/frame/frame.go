// Package frame is the codec of the quota owner protocol's batch frame
// ("op":"batch"): pure functions over bytes, no NATS, no state; the owner
// decodes requests and encodes replies, the coalescer the reverse.
package frame

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/sluice-dev/sluice/protocol"
)

// The batch frame: the binary form of "op":"batch". The owner answers with
// one reply frame for every item it could decide at once, then one for the
// items that waited on KV. An owner tells a JSON request ({…}) apart by
// the first byte.
//
// Request frame:
//
//	0xFA 0x01                    magic, version
//	uvarint count                items, 1..MaxItems
//	count × item:
//	  byte op                    1 = hit, 2 = settle (a frame with another op is malformed)
//	  uvarint partition          the client's partition of the tenant
//	  uvarint timeout_ms         what is left of the item's deadline
//	  bytes tenant               (uvarint length, then the bytes)
//	  op 1 (hit):
//	    uvarint charges          ≤ MaxCharges
//	    charges × {bytes kind, varint increment_us, varint capacity_us}
//	    byte claim               0 or 1; when 1:
//	      bytes source, bytes key, bytes hook_id, varint ttl_ms, varint pending_ttl_ms
//	  op 2 (settle):
//	    bytes source, bytes key, bytes hook_id, uvarint revision,
//	    varint ttl_ms            the committed claim's TTL (0: the owner's default)
//
// Reply frame:
//
//	0xFA 0x01
//	byte flags                   bit 0: more replies for this frame follow
//	bytes route                  a subject reaching this owner for any of its partitions ("" = none)
//	uvarint count
//	count × Answer:
//	  uvarint index              of the item in the request frame
//	  byte status                0 answered, 1 invalid (400), 2 unavailable (503),
//	                             3 not_owner, 4 claim_lost (409; settles only)
//	  status 0: byte result (1 ok, 2 duplicate, 3 pending, 4 rate_limited),
//	            bytes hook_id, uvarint retry_after_ms, uvarint revision,
//	            uvarint limits, limits × {varint remaining, uvarint reset_ms}
//	            (one per charge, in order; a settled settle: ok, all empty)
//	  else:     bytes reason
//
// Every item is answered exactly once, independently of the others. A
// frame that does not parse is answered like a malformed JSON request (400
// in the micro error headers) before any item is acted on.
const (
	Magic   = 0xFA
	Version = 0x01

	// OpHit is the op of a hit item.
	OpHit = 1
	// OpSettle is the op of a settle item.
	OpSettle = 2

	// MaxItems bounds the items of a frame and the answers of a reply.
	MaxItems = 1024
	// MaxPartitions bounds an item's partition number: the protocol's
	// bound (quota.MaxPartitions).
	MaxPartitions = 4096
	// MaxString bounds one length-prefixed string of a frame.
	MaxString = 1 << 20
)

// Status is an answer's status.
type Status = byte

// Answer statuses.
const (
	StatusAnswered    Status = 0
	StatusInvalid     Status = 1 // 400
	StatusUnavailable Status = 2 // 503
	StatusNotOwner    Status = 3 // the receiver does not (any more) serve the partition
	StatusLost        Status = 4 // 409 claim_lost: a settle of a claim the caller no longer holds
)

// Reply flags.
const (
	flagMore = 1 << 0
)

// Result is an answered hit's result.
type Result = byte

// Result codes (quota's ResultOK … ResultRateLimited).
const (
	ResultOK          Result = 1
	ResultDuplicate   Result = 2
	ResultPending     Result = 3
	ResultRateLimited Result = 4

	maxResult = ResultRateLimited
)

// ErrMalformed is a frame that does not parse.
var ErrMalformed = errors.New("malformed frame")

// Is reports whether data is a frame (not JSON).
func Is(data []byte) bool { return len(data) >= 2 && data[0] == Magic }

// ---- encoding ----

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendRequestHeader starts a request frame of count items.
func AppendRequestHeader(b []byte, count int) []byte {
	b = append(b, Magic, Version)
	return binary.AppendUvarint(b, uint64(count))
}

// A hit item is written field by field, in this order:
// AppendHitHead, AppendCharge once per charge, then AppendNoClaim or
// AppendClaim. The writer (the client) has checked the hit.

// AppendHitHead starts a hit item of partition n with timeoutMs left of
// its deadline, for tenant, with charges charges.
func AppendHitHead(b []byte, n int, timeoutMs int64, tenant string, charges int) []byte {
	b = append(b, OpHit)
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, uint64(max(timeoutMs, 0)))
	b = appendBytes(b, tenant)
	return binary.AppendUvarint(b, uint64(charges))
}

// AppendCharge appends one charge of a hit item.
func AppendCharge(b []byte, kind string, incrementUs, capacityUs int64) []byte {
	b = appendBytes(b, kind)
	b = binary.AppendVarint(b, incrementUs)
	return binary.AppendVarint(b, capacityUs)
}

// AppendNoClaim ends a hit item without a claim.
func AppendNoClaim(b []byte) []byte { return append(b, 0) }

// AppendClaim ends a hit item with its claim.
func AppendClaim(b []byte, source, key, hookID string, ttlMs, pendingTTLMs int64) []byte {
	b = append(b, 1)
	b = appendBytes(b, source)
	b = appendBytes(b, key)
	b = appendBytes(b, hookID)
	b = binary.AppendVarint(b, ttlMs)
	return binary.AppendVarint(b, pendingTTLMs)
}

// AppendSettle appends a settle item of partition n with timeoutMs left
// of its deadline. The writer (the client) has checked the settle.
func AppendSettle(b []byte, n int, timeoutMs int64, tenant, source, key, hookID string, revision uint64, ttlMs int64) []byte {
	b = append(b, OpSettle)
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, uint64(max(timeoutMs, 0)))
	b = appendBytes(b, tenant)
	b = appendBytes(b, source)
	b = appendBytes(b, key)
	b = appendBytes(b, hookID)
	b = binary.AppendUvarint(b, revision)
	return binary.AppendVarint(b, ttlMs)
}

// AppendItem appends a decoded item again (the inverse of DecodeRequest's
// item).
func AppendItem(b []byte, it *Item) []byte {
	if it.Op == OpSettle {
		return AppendSettle(b, it.N, it.TimeoutMs, string(it.Tenant), string(it.Source), string(it.Key), string(it.HookID), it.Revision, it.TTLMs)
	}
	b = AppendHitHead(b, it.N, it.TimeoutMs, string(it.Tenant), len(it.Charges))
	for _, c := range it.Charges {
		b = AppendCharge(b, string(c.Kind), c.Inc, c.Cap)
	}
	if !it.Claim {
		return AppendNoClaim(b)
	}
	return AppendClaim(b, string(it.Source), string(it.Key), string(it.HookID), it.TTLMs, it.PendingMs)
}

// AppendReplyHeader starts a reply frame.
func AppendReplyHeader(b []byte, more bool, route string, count int) []byte {
	var flags byte
	if more {
		flags |= flagMore
	}
	b = append(b, Magic, Version, flags)
	b = appendBytes(b, route)
	return binary.AppendUvarint(b, uint64(count))
}

// Answer is one item's answer as the owner encodes it.
type Answer struct {
	Index    int
	Status   Status
	Reason   string // Status != StatusAnswered
	Result   Result
	HookID   string
	RetryMs  int64
	Revision uint64
	Limits   []Limit
}

// Limit is one charge's bucket after the decision.
type Limit struct {
	Remaining int64
	ResetMs   int64
}

// AppendAnswer appends one answer to a reply frame.
func AppendAnswer(b []byte, a *Answer) []byte {
	b = binary.AppendUvarint(b, uint64(a.Index))
	b = append(b, a.Status)
	if a.Status != StatusAnswered {
		return appendBytes(b, a.Reason)
	}
	b = append(b, a.Result)
	b = appendBytes(b, a.HookID)
	b = binary.AppendUvarint(b, uint64(max(a.RetryMs, 0)))
	b = binary.AppendUvarint(b, a.Revision)
	b = binary.AppendUvarint(b, uint64(len(a.Limits)))
	for _, l := range a.Limits {
		b = binary.AppendVarint(b, l.Remaining)
		b = binary.AppendUvarint(b, uint64(max(l.ResetMs, 0)))
	}
	return b
}

// ---- decoding ----

// reader reads a frame; the first error sticks.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) byte() byte {
	if r.bad || len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *reader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads one value with decode (binary.Uvarint or binary.Varint);
// a short or overlong one marks the frame bad.
func readVarint[T uint64 | int64](r *reader, decode func([]byte) (T, int)) T {
	if r.bad {
		return 0
	}
	v, n := decode(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// int64 reads a uvarint that must fit an int64.
func (r *reader) int64() int64 {
	v := r.uvarint()
	if v > math.MaxInt64 {
		r.bad = true
		return 0
	}
	return int64(v)
}

// bytes returns the next length-prefixed bytes (aliasing the frame).
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.bad || n > MaxString || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// Charge is one decoded charge; Kind aliases the frame.
type Charge struct {
	Kind []byte
	Inc  int64
	Cap  int64
}

// Item is one decoded item, a hit or a settle (Op); its byte slices alias
// the frame. A settle has no charges and no claim: Source, Key, HookID,
// Revision and TTLMs are the claim it commits.
type Item struct {
	Op        byte
	N         int // the client's partition of Tenant
	TimeoutMs int64
	Tenant    []byte
	Charges   []Charge
	Claim     bool
	Source    []byte
	Key       []byte
	HookID    []byte
	TTLMs     int64
	PendingMs int64
	Revision  uint64 // settle only
}

// DecodeRequest decodes a request frame into items (reusing its
// capacity and that of each item's charges). A frame that does not parse
// as a whole is ErrMalformed; nothing of it may be acted on then.
func DecodeRequest(data []byte, items []Item) ([]Item, error) {
	r := reader{b: data}
	if r.byte() != Magic || r.byte() != Version {
		return items[:0], ErrMalformed
	}
	count := r.uvarint()
	if r.bad || count == 0 || count > MaxItems {
		return items[:0], ErrMalformed
	}
	items = items[:0]
	for range count {
		if len(items) < cap(items) {
			items = items[:len(items)+1]
		} else {
			items = append(items, Item{})
		}
		it := &items[len(items)-1]
		charges := it.Charges[:0]
		*it = Item{}
		it.Op = r.byte()
		if it.Op != OpHit && it.Op != OpSettle {
			return items[:0], ErrMalformed
		}
		n := r.uvarint()
		if n >= MaxPartitions {
			return items[:0], ErrMalformed
		}
		it.N = int(n)
		it.TimeoutMs = r.int64()
		it.Tenant = r.bytes()
		if it.Op == OpSettle {
			it.Charges = charges
			it.Source, it.Key, it.HookID = r.bytes(), r.bytes(), r.bytes()
			it.Revision, it.TTLMs = r.uvarint(), r.varint()
			if r.bad {
				return items[:0], ErrMalformed
			}
			continue
		}
		nc := r.uvarint()
		if r.bad || nc > protocol.MaxCharges {
			return items[:0], ErrMalformed
		}
		for range nc {
			charges = append(charges, Charge{Kind: r.bytes(), Inc: r.varint(), Cap: r.varint()})
		}
		it.Charges = charges
		switch r.byte() {
		case 0:
		case 1:
			it.Claim = true
			it.Source, it.Key, it.HookID = r.bytes(), r.bytes(), r.bytes()
			it.TTLMs, it.PendingMs = r.varint(), r.varint()
		default:
			return items[:0], ErrMalformed
		}
		if r.bad {
			return items[:0], ErrMalformed
		}
	}
	if r.bad || len(r.b) != 0 {
		return items[:0], ErrMalformed
	}
	return items, nil
}

// Reply is a decoded reply frame header.
type Reply struct {
	More  bool
	Route []byte
	Count int
	r     reader
}

// DecodeReply decodes the header of a reply frame; its answers follow
// with Next.
func DecodeReply(data []byte) (Reply, error) {
	f := Reply{r: reader{b: data}}
	if f.r.byte() != Magic || f.r.byte() != Version {
		return f, ErrMalformed
	}
	flags := f.r.byte()
	f.More = flags&flagMore != 0
	f.Route = f.r.bytes()
	c := f.r.uvarint()
	if f.r.bad || c > MaxItems {
		return f, ErrMalformed
	}
	f.Count = int(c)
	return f, nil
}

// ReplyAnswer is one decoded answer; byte slices alias the frame.
type ReplyAnswer struct {
	Index    int
	Status   Status
	Reason   []byte
	Result   Result
	HookID   []byte
	RetryMs  int64
	Revision uint64
	NLimits  int
	Limits   [protocol.MaxCharges]Limit
}

// Next decodes the next answer into a.
func (f *Reply) Next(a *ReplyAnswer) error {
	r := &f.r
	idx := r.uvarint()
	if idx >= MaxItems {
		return ErrMalformed
	}
	a.Index = int(idx)
	a.Status = r.byte()
	switch a.Status {
	case StatusAnswered:
		a.Result = r.byte()
		a.HookID = r.bytes()
		a.RetryMs = r.int64()
		a.Revision = r.uvarint()
		n := r.uvarint()
		if n > protocol.MaxCharges {
			return ErrMalformed
		}
		a.NLimits = int(n)
		for i := range a.NLimits {
			a.Limits[i] = Limit{Remaining: r.varint(), ResetMs: r.int64()}
		}
		if a.Result == 0 || a.Result > maxResult {
			return ErrMalformed
		}
	case StatusInvalid, StatusUnavailable, StatusNotOwner, StatusLost:
		a.Reason = r.bytes()
	default:
		return ErrMalformed
	}
	if r.bad {
		return ErrMalformed
	}
	return nil
}

// Done reports whether the whole frame was consumed without error.
func (f *Reply) Done() bool { return !f.r.bad && len(f.r.b) == 0 }
