package protocol

// The sync barriers (docs/PROTOCOL.md "Subjects" and "Leaf mode"): a
// request on either subject joins the next round of the answering node's
// group sync and is answered with a SyncReply once it completed. The
// hub's is asked by its leaves, the node's by the other nodes of an
// embedded R1 cluster; one server (durability.Serve) answers both.

// HubSyncSubject is a hub's sync barrier, served in the queue group
// HubSyncQueue. It is under the hub prefix, which nothing on a leaf
// serves: the edge runs the same service and would answer itself.
func HubSyncSubject(prefix string) string { return prefix + ".hub.v1.sync" }

// HubSyncQueue is the queue group a hub's nodes serve HubSyncSubject in.
const HubSyncQueue = "sluice_hub_sync"

// NodeSyncSubject is where the nodes of an embedded cluster serve their
// group sync to each other (every node, not a queue group).
func NodeSyncSubject(prefix string) string { return prefix + ".node.v1.sync" }

// SyncMaxWaiting bounds the sync requests one node holds waiting for its
// next round; beyond it a request is answered with an error at once (its
// requester asks again). A flood only ever joins the shared rounds; this
// bounds the memory it holds while a round is slow.
const SyncMaxWaiting = 10000

// SyncReply is the answer to a sync request: OK once the writes the
// answering server acknowledged before the request are durable, else
// Error says why.
type SyncReply struct {
	OK bool `json:"ok"`
	// Durability is a hub's level in force.
	Durability string `json:"durability,omitempty"`
	// Server is a cluster node's server name.
	Server string `json:"server,omitempty"`
	// UptimeNS is how long a cluster node's server has run: a server that
	// started after a write was acknowledged may not hold it (its machine
	// lost power), so its answer covers nothing yet.
	UptimeNS int64 `json:"uptime_ns,omitempty"`
	// Leads are the streams (of those a 2xx rests on) a cluster node's
	// server led before and after its round: their acknowledged writes
	// are durable.
	Leads []string `json:"leads,omitempty"`
	// Error is why the round failed ("" when OK).
	Error string `json:"error,omitempty"`
}
