package durability

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/protocol"
)

// Server answers the sync requests of one subject (protocol.HubSyncSubject
// on a hub, protocol.NodeSyncSubject on a cluster node) on one node.
type Server struct {
	sub     *nats.Subscription
	barrier Barrier
	answer  Answerer
	waiting atomic.Int64
}

// Barrier is what a sync request waits on: Then calls fn, without
// blocking, once a round that began after the call has completed (a
// GroupSync is one); forget drops fn for a caller that stopped waiting.
type Barrier interface {
	Then(fn func(error)) (forget func())
}

// Answerer makes a sync server's replies: a hub's (HubAnswer), a cluster
// node's (what Start serves: the streams its server leads).
type Answerer interface {
	// Arrived is called as a request arrives: what its reply must know of
	// that moment (a cluster node: the streams its server leads).
	Arrived() []string
	// Reply is the reply to a request that arrived with held, once its
	// round ended with err (nil: the writes before it are durable).
	Reply(held []string, err error) protocol.SyncReply
}

// Serve serves subject on nc (in queue, unless ""): each request joins the
// next round of barrier (nil: answered at once, the acks already mean
// what the reply says), and is answered with answer's Reply.
func Serve(nc *nats.Conn, subject, queue string, barrier Barrier, answer Answerer) (*Server, error) {
	s := &Server{barrier: barrier, answer: answer}
	var err error
	if s.sub, err = nc.QueueSubscribe(subject, queue, s.serve); err != nil {
		return nil, fmt.Errorf("durability: serve %s: %w", subject, err)
	}
	// A flood is answered or dropped, never queued without bound.
	if err := s.sub.SetPendingLimits(2*protocol.SyncMaxWaiting, 4<<20); err != nil {
		_ = s.sub.Unsubscribe()
		return nil, err
	}
	return s, nil
}

// Stop stops serving (a request still waiting for its round is answered
// by the round, or not at all: its requester times out and asks again).
func (s *Server) Stop() error { return s.sub.Unsubscribe() }

func (s *Server) serve(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	held := s.answer.Arrived()
	respond := func(err error) {
		r := s.answer.Reply(held, err)
		if err != nil {
			r.OK, r.Error, r.Leads = false, err.Error(), nil
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	}
	if s.barrier == nil {
		respond(nil)
		return
	}
	if s.waiting.Add(1) > protocol.SyncMaxWaiting {
		s.waiting.Add(-1)
		respond(errors.New("too many sync requests waiting"))
		return
	}
	s.barrier.Then(func(err error) { // on the barrier's goroutine: never blocks
		s.waiting.Add(-1)
		respond(err)
	})
}

// HubAnswer is a hub's Answerer: OK at Durability, its level in force.
type HubAnswer struct{ Durability string }

// Arrived holds nothing: a hub's reply is the same whenever it came.
func (HubAnswer) Arrived() []string { return nil }

// Reply is OK at a.Durability.
func (a HubAnswer) Reply([]string, error) protocol.SyncReply {
	return protocol.SyncReply{OK: true, Durability: a.Durability}
}
