package httpapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/protocol"
)

// Handoff makes a hook cross the cluster once: a node that receives a hook
// for a shard whose hooks stream another server leads hands the request
// whole, in one NATS request (protocol.HandoffSubject), to the node beside
// that leader, which serves it as its own (admits, claims, stores, settles
// and waits for its durability barrier, all next to the leader) and
// answers with the HTTP answer, which goes back to the sender unchanged.
// A hook the receiving node cannot hand off (no leader known, the leader's
// node not answering at once, a message over the max payload) is served
// where it arrived, as without a Handoff: correct either way, the hand-off
// only saves the writes' trips across the cluster.
type Handoff struct {
	Conn   *nats.Conn
	Prefix string
	Shards int
	// Leader names the server leading a shard's hooks stream ("": not
	// known). ShardLeaders.Of in a node; a test's fixed map otherwise.
	Leader func(shard int) string
	// Self is the name of this node's own server.
	Self string
}

// handedOffKey marks the context of a request served for another node: it
// is never handed on, and the node that received it writes its access log.
type handedOffKey struct{}

func handedOff(r *http.Request) bool { return r.Context().Value(handedOffKey{}) != nil }

// handoffBudget bounds the wait for the leader's node: what a hook served
// there may take (a hit, a claim read, the publish, the settle and the
// barrier, each within its own budget), so that its own 503 comes back
// rather than ours.
func (h *Handler) handoffBudget() time.Duration {
	return 2*h.cfg.PublishTimeout + 3*h.cfg.StoreTimeout
}

// handOff hands q to the node beside its shard's leader and writes that
// node's answer. false: q is to be served here.
func (h *Handler) handOff(q *hookRequest) bool {
	ho := h.cfg.Handoff
	if ho == nil || handedOff(q.r) {
		return false
	}
	leader := ho.Leader(protocol.Shard(q.tenant, max(ho.Shards, 1)))
	if leader == "" || leader == ho.Self {
		return false
	}
	msg := nats.NewMsg(protocol.HandoffSubject(ho.Prefix, leader))
	size := len(q.body) + len(msg.Subject)
	for k, vs := range q.r.Header {
		if isHandoffHeader(k) {
			continue
		}
		msg.Header[k] = slices.Clone(vs)
		for _, v := range vs {
			size += len(k) + len(v) + 4
		}
	}
	msg.Header.Set(protocol.HeaderHandoffMethod, q.r.Method)
	msg.Header.Set(protocol.HeaderHandoffURI, q.r.URL.RequestURI())
	msg.Header.Set(protocol.HeaderHandoffHost, q.r.Host)
	msg.Header.Set(protocol.HeaderHandoffRemote, q.r.RemoteAddr)
	// The request id this node already answers with (ServeHTTP).
	msg.Header.Set("X-Request-Id", q.w.Header().Get("X-Request-Id"))
	if int64(size)+HookOverheadBytes > ho.Conn.MaxPayload() {
		h.m.handoffs.WithLabelValues("too_large").Inc()
		return false
	}
	msg.Data = q.body
	ctx, cancel := context.WithTimeout(q.r.Context(), h.handoffBudget())
	defer cancel()
	rep, err := ho.Conn.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// Nothing was sent to any node: serve it here.
		h.m.handoffs.WithLabelValues("no_node").Inc()
		return false
	case err != nil:
		// The other node may have stored it: never serve it again here.
		// The sender's retry is a duplicate its key names, or (unkeyed)
		// a second hook, as after any lost answer.
		h.m.handoffs.WithLabelValues("failed").Inc()
		h.log.Warn("hook hand-off failed", "tenant", q.tenant, "source", q.source, "leader", leader, "error", err)
		h.unavailable(q)
		return true
	}
	code, err := strconv.Atoi(rep.Header.Get(protocol.HeaderHandoffStatus))
	if err != nil || code < 100 || code > 599 {
		h.m.handoffs.WithLabelValues("failed").Inc()
		h.log.Error("hook hand-off: an answer without a status", "leader", leader, "status", rep.Header.Get(protocol.HeaderHandoffStatus))
		h.unavailable(q)
		return true
	}
	h.m.handoffs.WithLabelValues("handed").Inc()
	for k, vs := range rep.Header {
		if !isHandoffHeader(k) {
			q.w.Header()[k] = vs
		}
	}
	q.w.WriteHeader(code)
	_, _ = q.w.Write(rep.Data)
	return true
}

func isHandoffHeader(k string) bool {
	return len(k) >= len("Sluice-Handoff-") && strings.EqualFold(k[:len("Sluice-Handoff-")], "Sluice-Handoff-")
}

// ServeHandoffs serves the hooks other nodes hand this one
// (protocol.HandoffSubject of Handoff.Self) until stop, which stops
// taking more and waits for those being served.
func (h *Handler) ServeHandoffs() (stop func(), err error) {
	ho := h.cfg.Handoff
	if ho == nil {
		return nil, errors.New("httpapi: ServeHandoffs without Config.Handoff")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex // closed and wg.Add against stop's wg.Wait
		closed bool
	)
	// Bounded like the hooks served at once: beyond it, 503 overloaded
	// at once (serveHook's own slots answer the same).
	sem := make(chan struct{}, h.cfg.MaxInFlight)
	sub, err := ho.Conn.Subscribe(protocol.HandoffSubject(ho.Prefix, ho.Self), func(m *nats.Msg) {
		select {
		case sem <- struct{}{}:
		default:
			rec := newHandoffRecorder()
			rec.Header().Set("Retry-After", "1")
			h.fail(rec, "overloaded", protocol.Overloaded, errorBody{})
			rec.respond(m)
			return
		}
		mu.Lock()
		if closed {
			mu.Unlock()
			<-sem
			return // stopping: the requester's timeout answers 503
		}
		wg.Add(1)
		mu.Unlock()
		go func() {
			defer func() { <-sem; wg.Done() }()
			h.serveHandoff(ctx, m)
		}()
	})
	if err != nil {
		cancel()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			mu.Lock()
			closed = true
			mu.Unlock()
			wg.Wait()
			cancel()
		})
	}, nil
}

// serveHandoff serves one handed-off hook as the request it was, and
// answers with what this node would have answered its sender.
func (h *Handler) serveHandoff(ctx context.Context, m *nats.Msg) {
	rec := newHandoffRecorder()
	method, uri := m.Header.Get(protocol.HeaderHandoffMethod), m.Header.Get(protocol.HeaderHandoffURI)
	if !slices.Contains(hookMethods, method) || !strings.HasPrefix(uri, "/v1/hooks/") {
		h.fail(rec, "invalid", protocol.InvalidRequest, errorBody{})
		rec.respond(m)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, handedOffKey{}, true), h.handoffBudget())
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, method, uri, bytes.NewReader(m.Data))
	if err != nil {
		h.fail(rec, "invalid", protocol.InvalidRequest, errorBody{})
		rec.respond(m)
		return
	}
	for k, vs := range m.Header {
		if !isHandoffHeader(k) {
			r.Header[k] = vs
		}
	}
	r.Host = m.Header.Get(protocol.HeaderHandoffHost)
	r.RemoteAddr = m.Header.Get(protocol.HeaderHandoffRemote)
	r.ContentLength = int64(len(m.Data))
	h.ServeHTTP(rec, r)
	rec.respond(m)
}

// handoffRecorder is the http.ResponseWriter of a handed-off hook.
type handoffRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func newHandoffRecorder() *handoffRecorder { return &handoffRecorder{header: http.Header{}} }

func (r *handoffRecorder) Header() http.Header { return r.header }
func (r *handoffRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *handoffRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}

// respond answers m with the recorded HTTP answer (a failed respond is the
// requester's timeout: it answers its sender 503).
func (r *handoffRecorder) respond(m *nats.Msg) {
	out := nats.NewMsg(m.Reply)
	for k, vs := range r.header {
		out.Header[k] = vs
	}
	if r.code == 0 {
		r.code = http.StatusOK
	}
	out.Header.Set(protocol.HeaderHandoffStatus, strconv.Itoa(r.code))
	out.Data = r.body.Bytes()
	_ = m.RespondMsg(out)
}

// ShardLeaders follows which server leads each shard's hooks stream, for
// Handoff.Leader: asked of JetStream every interval (a stale answer only
// sends a hook the long way: the node it goes to serves it all the same).
type ShardLeaders struct {
	js      jetstream.JetStream
	streams []string
	leaders []atomic.Pointer[string]
	log     *slog.Logger
}

// NewShardLeaders follows the leaders of the hooks streams of shards
// shards named after stream (HooksStreams).
func NewShardLeaders(js jetstream.JetStream, stream string, shards int, log *slog.Logger) *ShardLeaders {
	streams := HooksStreams(stream, shards)
	return &ShardLeaders{js: js, streams: streams, leaders: make([]atomic.Pointer[string], len(streams)), log: log}
}

// Of is the server leading shard k's hooks stream ("": not known yet).
func (l *ShardLeaders) Of(k int) string {
	if k < 0 || k >= len(l.leaders) {
		return ""
	}
	if p := l.leaders[k].Load(); p != nil {
		return *p
	}
	return ""
}

// Run asks for the leaders now and every interval until ctx is done.
func (l *ShardLeaders) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		l.refresh(ctx, every)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *ShardLeaders) refresh(ctx context.Context, budget time.Duration) {
	for k, name := range l.streams {
		sctx, cancel := context.WithTimeout(ctx, budget)
		st, err := l.js.Stream(sctx, name)
		cancel()
		leader := ""
		if err == nil && st.CachedInfo().Cluster != nil {
			leader = st.CachedInfo().Cluster.Leader
		} else if err != nil && ctx.Err() == nil {
			l.log.Debug("shard leader unknown", "stream", name, "error", err)
		}
		l.leaders[k].Store(&leader)
	}
}
