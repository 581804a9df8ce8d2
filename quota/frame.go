package quota

import (
	"encoding/binary"
	"errors"
	"math"
)

// The batch frame: the binary form of "op":"batch" on the owner protocol.
// A client coalesces concurrent hits for one owner into one request frame;
// the owner decides them in one go and answers with one reply frame for
// every item it could decide at once, then one more for the items that
// waited on KV (claims). JSON requests ({…}) stay valid on the same
// subjects: an owner tells the two apart by the first byte, and a client
// whose frame is answered with an error header (an owner that predates
// frames) falls back to one JSON request per hit.
//
// Request frame:
//
//	0xFA 0x01                    magic, version
//	uvarint count                items, 1..maxFrameItems
//	count × item:
//	  byte op                    1 = hit (a frame with another op is malformed)
//	  uvarint partition          the client's partition of the tenant
//	  uvarint timeout_ms         what is left of the item's deadline
//	  bytes tenant               (uvarint length, then the bytes)
//	  uvarint charges            ≤ maxFrameCharges
//	  charges × {bytes kind, varint increment_us, varint capacity_us}
//	  byte claim                 0 or 1; when 1:
//	    bytes source, bytes key, bytes hook_id, varint ttl_ms, varint pending_ttl_ms
//
// Reply frame:
//
//	0xFA 0x01
//	byte flags                   bit 0: more replies for this frame follow
//	bytes route                  a subject that reaches this owner's worker
//	                             for any partition it serves ("" = none)
//	uvarint count
//	count × answer:
//	  uvarint index              of the item in the request frame
//	  byte status                0 = answered, 1 = invalid (400),
//	                             2 = unavailable (503), 3 = not_owner
//	  status 0: byte result (1 ok, 2 duplicate, 3 pending, 4 rate_limited),
//	            bytes hook_id, uvarint retry_after_ms, uvarint revision,
//	            uvarint limits, limits × {varint remaining, uvarint reset_ms}
//	            (one per charge of the item, in its order)
//	  else:     bytes reason
//
// Every item is answered exactly once. Items are independent: one that is
// invalid, denied or not owned here does not affect the others. A frame
// that does not parse is answered like a malformed JSON request (400 in
// the micro error headers), before any item is acted on: a client reads an
// error header as "this owner does not speak frames" and resends its items
// as JSON, so a later version may add ops or fields by bumping the version.
const (
	frameMagic   = 0xFA
	frameVersion = 0x01

	opItemHit = 1

	maxFrameItems   = 1024
	maxFrameCharges = MaxCharges
	maxFrameString  = 1 << 20
)

// Answer statuses.
const (
	stAnswered    = 0
	stInvalid     = 1
	stUnavailable = 2
	stNotOwner    = 3
)

// resultCode is a hit's result on the wire of a reply frame.
type resultCode = byte

// Result codes.
const (
	resOK          resultCode = 1
	resDuplicate   resultCode = 2
	resPending     resultCode = 3
	resRateLimited resultCode = 4
)

// resultCodes names the result codes (0: none).
var resultCodes = [...]string{resOK: ResultOK, resDuplicate: ResultDuplicate, resPending: ResultPending, resRateLimited: ResultRateLimited}

// errFrame is a frame that does not parse.
var errFrame = errors.New("malformed frame")

// isFrame reports whether data is a frame (not JSON).
func isFrame(data []byte) bool { return len(data) >= 2 && data[0] == frameMagic }

// ---- encoding ----

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendFrameHeader starts a request frame of count items.
func appendFrameHeader(b []byte, count int) []byte {
	b = append(b, frameMagic, frameVersion)
	return binary.AppendUvarint(b, uint64(count))
}

// appendHitItem appends one hit (validated by the caller: one tenant).
func appendHitItem(b []byte, n int, timeoutMs int64, r *HitRequest) []byte {
	b = append(b, opItemHit)
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, uint64(max(timeoutMs, 0)))
	b = appendBytes(b, r.Tenant())
	b = binary.AppendUvarint(b, uint64(len(r.Charges)))
	for i := range r.Charges {
		c := &r.Charges[i]
		b = appendBytes(b, c.Kind)
		b = binary.AppendVarint(b, c.IncrementUs)
		b = binary.AppendVarint(b, c.CapacityUs)
	}
	if r.Claim == nil {
		return append(b, 0)
	}
	c := r.Claim
	b = append(b, 1)
	b = appendBytes(b, c.Source)
	b = appendBytes(b, c.Key)
	b = appendBytes(b, c.HookID)
	b = binary.AppendVarint(b, c.TTLMs)
	return binary.AppendVarint(b, c.PendingTTLMs)
}

// appendReplyHeader starts a reply frame.
func appendReplyHeader(b []byte, more bool, route string, count int) []byte {
	var flags byte
	if more {
		flags = 1
	}
	b = append(b, frameMagic, frameVersion, flags)
	b = appendBytes(b, route)
	return binary.AppendUvarint(b, uint64(count))
}

// answer is one item's answer as the owner encodes it.
type answer struct {
	index    int
	status   byte
	reason   string // status != 0
	result   resultCode
	hookID   string
	retryMs  int64
	revision uint64
	limits   []limitPair
}

// limitPair is one charge's bucket after the decision.
type limitPair struct {
	remaining int64
	resetMs   int64
}

func appendAnswer(b []byte, a *answer) []byte {
	b = binary.AppendUvarint(b, uint64(a.index))
	b = append(b, a.status)
	if a.status != stAnswered {
		return appendBytes(b, a.reason)
	}
	b = append(b, a.result)
	b = appendBytes(b, a.hookID)
	b = binary.AppendUvarint(b, uint64(max(a.retryMs, 0)))
	b = binary.AppendUvarint(b, a.revision)
	b = binary.AppendUvarint(b, uint64(len(a.limits)))
	for _, l := range a.limits {
		b = binary.AppendVarint(b, l.remaining)
		b = binary.AppendUvarint(b, uint64(max(l.resetMs, 0)))
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

func (r *reader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
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

func (r *reader) varint() int64 {
	if r.bad {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes returns the next length-prefixed bytes (aliasing the frame).
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.bad || n > maxFrameString || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// wireCharge is one decoded charge; kind aliases the frame.
type wireCharge struct {
	kind []byte
	inc  int64
	cap  int64
}

// wireHit is one decoded hit item; its byte slices alias the frame.
type wireHit struct {
	op        byte
	n         int
	timeoutMs int64
	tenant    []byte
	charges   []wireCharge
	claim     bool
	source    []byte
	key       []byte
	hookID    []byte
	ttlMs     int64
	pendingMs int64
}

// decodeRequestFrame decodes a request frame into items (reusing its
// capacity and that of each item's charges). A frame that does not parse
// as a whole is errFrame; nothing of it may be acted on then.
func decodeRequestFrame(data []byte, items []wireHit) ([]wireHit, error) {
	r := reader{b: data}
	if r.byte() != frameMagic || r.byte() != frameVersion {
		return items[:0], errFrame
	}
	count := r.uvarint()
	if r.bad || count == 0 || count > maxFrameItems {
		return items[:0], errFrame
	}
	items = items[:0]
	for range count {
		if len(items) < cap(items) {
			items = items[:len(items)+1]
		} else {
			items = append(items, wireHit{})
		}
		it := &items[len(items)-1]
		charges := it.charges[:0]
		*it = wireHit{}
		it.op = r.byte()
		if it.op != opItemHit {
			return items[:0], errFrame
		}
		n := r.uvarint()
		if n >= MaxPartitions {
			return items[:0], errFrame
		}
		it.n = int(n)
		it.timeoutMs = r.int64()
		it.tenant = r.bytes()
		nc := r.uvarint()
		if r.bad || nc > maxFrameCharges {
			return items[:0], errFrame
		}
		for range nc {
			charges = append(charges, wireCharge{kind: r.bytes(), inc: r.varint(), cap: r.varint()})
		}
		it.charges = charges
		switch r.byte() {
		case 0:
		case 1:
			it.claim = true
			it.source, it.key, it.hookID = r.bytes(), r.bytes(), r.bytes()
			it.ttlMs, it.pendingMs = r.varint(), r.varint()
		default:
			return items[:0], errFrame
		}
		if r.bad {
			return items[:0], errFrame
		}
	}
	if r.bad || len(r.b) != 0 {
		return items[:0], errFrame
	}
	return items, nil
}

// request rebuilds the HitRequest of a decoded item (allocating).
func (it *wireHit) request() HitRequest {
	tenant := string(it.tenant)
	r := HitRequest{}
	if len(it.charges) > 0 {
		r.Charges = make([]Charge, len(it.charges))
		for i, c := range it.charges {
			r.Charges[i] = Charge{Kind: internKind(c.kind), Tenant: tenant, IncrementUs: c.inc, CapacityUs: c.cap}
		}
	}
	if it.claim {
		r.Claim = &ClaimRequest{
			Tenant: tenant, Source: string(it.source), Key: string(it.key), HookID: string(it.hookID),
			TTLMs: it.ttlMs, PendingTTLMs: it.pendingMs,
		}
	}
	return r
}

// validate checks the item with HitRequest.Validate's rules. A
// charges-only item is checked in place, without allocating; one with a
// claim is rebuilt as a HitRequest (its claim allocates anyway).
func (it *wireHit) validate() error {
	if it.claim {
		r := it.request()
		return r.Validate()
	}
	return validateCharges(frameCharges{it}, it.tenant, false)
}

// frameCharges is the chargeList of a decoded item: every charge is for
// the item's tenant.
type frameCharges struct{ it *wireHit }

func (f frameCharges) len() int { return len(f.it.charges) }

func (f frameCharges) at(i int) (kind, tenant []byte, inc, capacity int64) {
	c := &f.it.charges[i]
	return c.kind, f.it.tenant, c.inc, c.cap
}

// replyFrame is a decoded reply frame header.
type replyFrame struct {
	more  bool
	route []byte
	count int
	r     reader
}

func decodeReplyHeader(data []byte) (replyFrame, error) {
	f := replyFrame{r: reader{b: data}}
	if f.r.byte() != frameMagic || f.r.byte() != frameVersion {
		return f, errFrame
	}
	f.more = f.r.byte()&1 != 0
	f.route = f.r.bytes()
	c := f.r.uvarint()
	if f.r.bad || c > maxFrameItems {
		return f, errFrame
	}
	f.count = int(c)
	return f, nil
}

// wireAnswer is one decoded answer; byte slices alias the frame.
type wireAnswer struct {
	index    int
	status   byte
	reason   []byte
	result   resultCode
	hookID   []byte
	retryMs  int64
	revision uint64
	nLimits  int
	limits   [maxFrameCharges]limitPair
}

// next decodes the next answer into a.
func (f *replyFrame) next(a *wireAnswer) error {
	r := &f.r
	idx := r.uvarint()
	if idx >= maxFrameItems {
		return errFrame
	}
	a.index = int(idx)
	a.status = r.byte()
	switch a.status {
	case stAnswered:
		a.result = r.byte()
		a.hookID = r.bytes()
		a.retryMs = r.int64()
		a.revision = r.uvarint()
		n := r.uvarint()
		if n > maxFrameCharges {
			return errFrame
		}
		a.nLimits = int(n)
		for i := range a.nLimits {
			a.limits[i] = limitPair{remaining: r.varint(), resetMs: r.int64()}
		}
		if int(a.result) >= len(resultCodes) || a.result == 0 {
			return errFrame
		}
	case stInvalid, stUnavailable, stNotOwner:
		a.reason = r.bytes()
	default:
		return errFrame
	}
	if r.bad {
		return errFrame
	}
	return nil
}

// done reports whether the whole frame was consumed without error.
func (f *replyFrame) done() bool { return !f.r.bad && len(f.r.b) == 0 }
