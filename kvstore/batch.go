package kvstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Writes that travel together (docs/DESIGN.md "How a write travels"). On a
// replicated stream every write alone is its own Raft entry and, under
// sync always, its own fsync on every replica; an atomic batch is one
// proposal of all its entries (nats-server ProposeMulti) and one sync. So
// a batched acker sends a write at once while fewer than maxUnitsInFlight
// units (a write alone or a batch) await their acks, and otherwise queues
// it: when a unit's ack comes, the queue leaves as one atomic batch. A
// lone write therefore waits for nothing, and a batch is what arrived
// while the stream was busy, as the group commit's rounds are.
//
// Each write keeps its own outcome. The stream commits a batch whole, in
// consecutive sequences, and acks the commit with the last sequence and
// the count, so write i of n got last-n+1+i. A batch is refused whole when
// one write fails its check (a create-if-absent whose key exists, a
// revision that moved on, a duplicate message id, a full stream): nothing
// of it is stored, and each write is then sent again alone, as an unbatched
// write would have been, to get its own answer — one round trip more for
// the writes of a batch that held a conflict, none for the others' order.
//
// Batching is for replicated streams only (Batched): on an R1 file stream
// nats-server stages each atomic batch in a file store of its own, made
// and synced per batch (jetstream_batching.go newBatchStore), which costs
// more than the writes alone.

const (
	// maxUnitsInFlight bounds the units of a batched acker awaiting their
	// acks: one more than one, so that a unit whose ack is slow (or lost,
	// until its waiters' deadlines) does not hold every write behind it.
	maxUnitsInFlight = 2
	// maxBatchWrites and maxBatchBytes bound one batch (the server's own
	// bound is 1,000 messages).
	maxBatchWrites = 64
	maxBatchBytes  = 1 << 20
)

// Batched reports whether writes to a stream of replicas replicas travel
// in atomic batches: the one rule for every stream sluice writes.
func Batched(replicas int) bool { return replicas > 1 }

// batchable reports whether writes to the stream sc travel in batches.
func batchable(sc jetstream.StreamConfig) bool {
	return Batched(sc.Replicas) && sc.AllowAtomicPublish
}

// Headers of JetStream's atomic batch publish (nats-server 2.12+).
const (
	HeaderBatchID     = "Nats-Batch-Id"
	HeaderBatchSeq    = "Nats-Batch-Sequence"
	HeaderBatchCommit = "Nats-Batch-Commit"
)

// flush sends the queue while units may fly.
func (a *acker) flush() {
	for {
		a.mu.Lock()
		if !a.batched || a.flying >= maxUnitsInFlight || len(a.queue) == 0 {
			a.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(a.queue) && n < maxBatchWrites {
			size += len(a.queue[n].msg.Subject) + len(a.queue[n].msg.Data)
			if n > 0 && size > maxBatchBytes {
				break
			}
			n++
		}
		writes := make([]*ackWait, n)
		copy(writes, a.queue)
		a.queue = append(a.queue[:0], a.queue[n:]...)
		u := a.unitLocked(writes, true)
		if n > 1 {
			a.batches++
		}
		a.mu.Unlock()
		if err := a.send(u); err != nil {
			a.mu.Lock()
			a.dropLocked(u)
			a.mu.Unlock()
			for _, w := range writes {
				w.resolve(0, err)
			}
		}
	}
}

// send publishes a unit: a write alone with its reply subject, or a batch
// whose commit alone carries one. An error means no commit was sent (the
// stream abandons a batch without one).
func (a *acker) send(u *ackUnit) error {
	if len(u.writes) == 1 {
		m := u.writes[0].msg
		return MapError(a.nc.PublishMsg(&nats.Msg{Subject: m.Subject, Reply: u.reply, Header: m.Header, Data: m.Data}))
	}
	id := nuid.Next()
	for i, w := range u.writes {
		hdr := make(nats.Header, len(w.msg.Header)+3)
		for k, v := range w.msg.Header {
			hdr[k] = v
		}
		hdr[HeaderBatchID] = []string{id}
		hdr[HeaderBatchSeq] = []string{strconv.Itoa(i + 1)}
		m := &nats.Msg{Subject: w.msg.Subject, Header: hdr, Data: w.msg.Data}
		if i == len(u.writes)-1 {
			hdr[HeaderBatchCommit] = []string{"1"}
			m.Reply = u.reply
		}
		if err := a.nc.PublishMsg(m); err != nil {
			return MapError(err)
		}
	}
	return nil
}

// resolveBatch answers the writes of a batch from its commit's ack: each
// its sequence, or, when the stream refused the batch, each sent again
// alone for its own answer.
func (a *acker) resolveBatch(u *ackUnit, seq, count uint64, err error) {
	n := uint64(len(u.writes))
	var apiErr *jetstream.APIError
	switch {
	case err == nil && count == n:
		for i, w := range u.writes {
			w.resolve(seq-n+1+uint64(i), nil)
		}
	case err == nil:
		err = fmt.Errorf("%w: a batch of %d acked with a count of %d", ErrUnavailable, n, count)
		for _, w := range u.writes {
			w.resolve(0, err)
		}
	case errors.As(err, &apiErr):
		for _, w := range u.writes {
			a.alone(w)
		}
	default:
		for _, w := range u.writes {
			w.resolve(0, err)
		}
	}
}

// alone sends a write of a refused batch again by itself (a unit not
// counted in flight: it is the batch's retry, not new work).
func (a *acker) alone(w *ackWait) {
	a.mu.Lock()
	if w.gone {
		a.mu.Unlock()
		return
	}
	u := a.unitLocked([]*ackWait{w}, false)
	a.mu.Unlock()
	if err := a.send(u); err != nil {
		a.mu.Lock()
		a.dropLocked(u)
		a.mu.Unlock()
		w.resolve(0, err)
	}
}

var ackCount = []byte(`"count":`)

// parseAckCount is parseAck for an ack that may answer a batch's commit:
// it also returns the batch's count (0 for a write alone).
func parseAckCount(data []byte) (seq, count uint64, err error) {
	if !bytes.Contains(data, ackCount) {
		seq, err = parseAck(data)
		return seq, 0, err
	}
	var resp struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
		Count  uint64              `json:"count"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrUnavailable, jetstream.ErrInvalidJSAck)
	}
	if resp.Error != nil {
		return 0, 0, MapError(fmt.Errorf("nats: %w", resp.Error))
	}
	if resp.Stream == "" {
		return 0, 0, fmt.Errorf("%w: %w", ErrUnavailable, jetstream.ErrInvalidJSAck)
	}
	return resp.Seq, resp.Count, nil
}
