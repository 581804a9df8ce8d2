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
	then    func(func(error)) (forget func())
	answer  func() func(error) protocol.SyncReply
	waiting atomic.Int64
}

// Serve serves subject on nc (in queue, unless ""): each request joins the
// next round of then (GroupSync.Then of the node's barrier; nil:
// answered at once, the acks already mean what the reply says). answer is
// called as a request arrives and returns the reply its round's outcome
// makes (nil: OK).
func Serve(nc *nats.Conn, subject, queue string, then func(func(error)) (forget func()), answer func() func(error) protocol.SyncReply) (*Server, error) {
	s := &Server{then: then, answer: answer}
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
	reply := s.answer()
	respond := func(err error) {
		r := reply(err)
		if err != nil {
			r.OK, r.Error, r.Leads = false, err.Error(), nil
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	}
	if s.then == nil {
		respond(nil)
		return
	}
	if s.waiting.Add(1) > protocol.SyncMaxWaiting {
		s.waiting.Add(-1)
		respond(errors.New("too many sync requests waiting"))
		return
	}
	s.then(func(err error) { // on the barrier's goroutine: never blocks
		s.waiting.Add(-1)
		respond(err)
	})
}

// HubAnswer is a hub's reply: OK at durability, its level in force.
func HubAnswer(durability string) func() func(error) protocol.SyncReply {
	return func() func(error) protocol.SyncReply {
		return func(error) protocol.SyncReply { return protocol.SyncReply{OK: true, Durability: durability} }
	}
}
