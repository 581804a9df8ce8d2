package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/protocol"
)

// ShardMapTTL is how long GET /v1/shards answers from the map it last
// read: a leader that moved is named within it, and a flood of requests
// costs the cluster one read per ShardMapTTL.
const ShardMapTTL = time.Second

// shardMapWait bounds each read of the map (a stream's info, a node's
// address).
const shardMapWait = time.Second

// NodeSubject is the subject on which the node whose NATS server is named
// server answers its advertised HTTP address (docs/PROTOCOL.md "Shards"):
// <prefix>.node.v1.http.<server>, the name as one token
// (protocol.EncodeToken). A node-to-node subject, as NodeSyncSubject.
func NodeSubject(prefix, server string) string {
	return prefix + ".node.v1.http." + protocol.EncodeToken(server)
}

// NodeAddr is a node's answer on NodeSubject.
type NodeAddr struct {
	Node string `json:"node"`
	HTTP string `json:"http"`
}

// ShardMapConfig is a ShardMap's dependencies.
type ShardMapConfig struct {
	Conn   *nats.Conn
	JS     jetstream.JetStream
	Prefix string
	Shards int // 0 or 1: one shard
	// Hooks and Claims are the streams of each shard's hooks and claims
	// bucket, in shard order.
	Hooks, Claims []string
	// Advertise is this node's HTTP address as other nodes and clients
	// reach it (--http-advertise); read on each question.
	Advertise func() string
	Logger    *slog.Logger
	Now       func() time.Time
}

// ShardMap says which node serves each shard (GET /v1/shards): the node
// whose server leads the shard's hooks stream, and its HTTP address, which
// each node answers for itself on NodeSubject. Embedded clusters only.
type ShardMap struct {
	cfg ShardMapConfig
	sub *nats.Subscription

	mu   sync.Mutex
	at   time.Time
	last []ShardEntry
}

// ShardEntry is one shard of GET /v1/shards.
type ShardEntry struct {
	Shard int    `json:"shard"`
	Node  string `json:"node"` // the hooks stream's leader ("": none now)
	HTTP  string `json:"http"` // its advertised HTTP address ("": unknown)
	// StreamsLed: the node leads the shard's claims bucket as well, where
	// a hook is served with no hop to another node's streams.
	StreamsLed bool `json:"streams_led"`
}

// NewShardMap answers this node's address on NodeSubject (named by the
// server the connection is on: the node's own embedded server).
func NewShardMap(cfg ShardMapConfig) (*ShardMap, error) {
	if cfg.Conn == nil || cfg.JS == nil || cfg.Advertise == nil || len(cfg.Hooks) != max(cfg.Shards, 1) || len(cfg.Claims) != len(cfg.Hooks) {
		return nil, errors.New("httpapi: ShardMapConfig: Conn, JS, Advertise and one hooks and claims stream per shard are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &ShardMap{cfg: cfg}
	name := cfg.Conn.ConnectedServerName()
	sub, err := cfg.Conn.Subscribe(NodeSubject(cfg.Prefix, name), func(msg *nats.Msg) {
		b, _ := json.Marshal(NodeAddr{Node: name, HTTP: cfg.Advertise()})
		_ = msg.Respond(b)
	})
	if err != nil {
		return nil, err
	}
	m.sub = sub
	return m, nil
}

// Stop stops answering on NodeSubject.
func (m *ShardMap) Stop() { _ = m.sub.Unsubscribe() }

// Read is the map now, from the cache if it is younger than ShardMapTTL.
func (m *ShardMap) Read(ctx context.Context) []ShardEntry {
	m.mu.Lock() // one read at a time: the others wait for it and share it
	defer m.mu.Unlock()
	if now := m.cfg.Now(); m.last != nil && now.Sub(m.at) < ShardMapTTL {
		return m.last
	}
	out := make([]ShardEntry, len(m.cfg.Hooks))
	addrs := map[string]string{}
	for k := range out {
		out[k] = ShardEntry{Shard: k, Node: m.leader(ctx, m.cfg.Hooks[k])}
		if out[k].Node == "" {
			continue
		}
		out[k].StreamsLed = m.leader(ctx, m.cfg.Claims[k]) == out[k].Node
		a, ok := addrs[out[k].Node]
		if !ok {
			a = m.addr(ctx, out[k].Node)
			addrs[out[k].Node] = a
		}
		out[k].HTTP = a
	}
	m.at, m.last = m.cfg.Now(), out
	return out
}

// leader is the server leading stream ("": none, or not known in time).
func (m *ShardMap) leader(ctx context.Context, stream string) string {
	ctx, cancel := context.WithTimeout(ctx, shardMapWait)
	defer cancel()
	st, err := m.cfg.JS.Stream(ctx, stream)
	if err != nil {
		m.cfg.Logger.Debug("shard map: stream info", "stream", stream, "error", err)
		return ""
	}
	if c := st.CachedInfo().Cluster; c != nil {
		return c.Leader
	}
	return ""
}

// addr asks the node on server its advertised HTTP address ("": no answer).
func (m *ShardMap) addr(ctx context.Context, server string) string {
	ctx, cancel := context.WithTimeout(ctx, shardMapWait)
	defer cancel()
	msg, err := m.cfg.Conn.RequestWithContext(ctx, NodeSubject(m.cfg.Prefix, server), nil)
	if err != nil {
		m.cfg.Logger.Debug("shard map: node address", "server", server, "error", err)
		return ""
	}
	var a NodeAddr
	if json.Unmarshal(msg.Data, &a) != nil || a.Node != server {
		return ""
	}
	return a.HTTP
}

// ServeHTTP answers GET /v1/shards: {"shards":S,"map":[ShardEntry…]};
// with ?tenant=T, {"tenant":T,"shard":k,…} for T's shard alone. Nothing
// is looked up about the tenant: the answer is the same for any name.
func (m *ShardMap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tenant, asked := q.Get("tenant"), q.Has("tenant")
	if len(q) > 1 || (len(q) == 1 && !asked) || len(q["tenant"]) > 1 {
		protocol.InvalidRequest.Write(w, map[string]any{"detail": "the only parameter is one tenant"})
		return
	}
	if asked && (tenant == "" || len(tenant) > protocol.MaxNameBytes || strings.ContainsAny(tenant, "/")) {
		protocol.InvalidRequest.Write(w, map[string]any{"detail": "tenant must be 1..256 bytes, no /"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	entries := m.Read(r.Context())
	if !asked {
		writeJSON(w, http.StatusOK, map[string]any{"shards": len(entries), "map": entries})
		return
	}
	e := entries[protocol.Shard(tenant, len(entries))]
	writeJSON(w, http.StatusOK, map[string]any{"tenant": tenant, "shard": e.Shard, "node": e.Node, "http": e.HTTP, "streams_led": e.StreamsLed})
}
