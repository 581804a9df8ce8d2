package natsembed

import (
	"slices"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// NodeAnswer is a cluster node's reply to a sync request
// (durability.Serve on protocol.NodeSyncSubject): the streams of streams
// this server led when the request arrived and still leads after its
// round.
func (s *Server) NodeAnswer(streams []string) func() func(error) protocol.SyncReply {
	streams = slices.Clone(streams)
	return func() func(error) protocol.SyncReply {
		before := s.leads(streams)
		return func(err error) protocol.SyncReply {
			r := protocol.SyncReply{OK: true, Server: s.ns.Name(), UptimeNS: int64(time.Since(s.started))}
			if err == nil {
				r.Leads = s.leads(before)
			}
			return r
		}
	}
}

// leads are the streams of names this server leads now (an R1 stream:
// holds).
func (s *Server) leads(names []string) []string {
	acc := s.ns.GlobalAccount()
	var out []string
	for _, n := range names {
		if acc.JetStreamIsStreamLeader(n) {
			out = append(out, n)
		}
	}
	return out
}
