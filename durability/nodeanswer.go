package durability

import (
	"slices"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// Embedded is the embedded server durability runs on (natsembed.Server is
// one): its rounds sync the files under StoreDir.
type Embedded interface {
	// StoreDir is where JetStream keeps the server's files.
	StoreDir() string
	// StreamSeqs is every stream of the server's account and its last
	// sequence.
	StreamSeqs() (map[string]uint64, error)
	// ClusterPeers are the cluster's servers (sorted; offline ones only
	// withOffline; nil when not clustered).
	ClusterPeers(withOffline bool) []string
	// Leads are the streams of names the server leads now.
	Leads(names []string) []string
	// Name is the server's name, Started when it began.
	Name() string
	Started() time.Time
}

// nodeAnswer is a cluster node's Answerer (Serve on
// protocol.NodeSyncSubject): the streams of streams srv led when the
// request arrived and still leads after its round.
type nodeAnswer struct {
	srv     Embedded
	streams []string
}

func newNodeAnswer(srv Embedded, streams []string) nodeAnswer {
	return nodeAnswer{srv: srv, streams: slices.Clone(streams)}
}

// Arrived is the streams the server leads now.
func (a nodeAnswer) Arrived() []string { return a.srv.Leads(a.streams) }

// Reply is OK with the server's name and uptime and, after a round that
// succeeded, those of before it still leads.
func (a nodeAnswer) Reply(before []string, err error) protocol.SyncReply {
	r := protocol.SyncReply{OK: true, Server: a.srv.Name(), UptimeNS: int64(time.Since(a.srv.Started()))}
	if err == nil {
		r.Leads = a.srv.Leads(before)
	}
	return r
}
