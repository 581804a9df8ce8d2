package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/ownerkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ---- fixtures ----

// fakeQuota is a narrow Quota fake for what the real worker cannot be made
// to do on demand (a fixed reply, a node-local answer, a hang, a panic, an
// arbitrary error): hits answer what hitFn says (default "ok" with revision
// 7), counters are plain in-memory counts, and err, when set, fails every
// call. It records the hits it received. Its settles are store's
// (claims.Store.Settle, as the owner's for a claim it did not grant).
type fakeQuota struct {
	mu     sync.Mutex
	hitFn  func(ctx context.Context, req protocol.HitRequest) (protocol.HitReply, error)
	hits   []protocol.HitRequest
	counts map[[2]string]int64
	err    error
	store  claims.Store
}

func newFakeQuota() *fakeQuota { return &fakeQuota{counts: map[[2]string]int64{}} }

func (f *fakeQuota) Hit(ctx context.Context, req protocol.HitRequest) (protocol.HitReply, error) {
	f.mu.Lock()
	f.hits = append(f.hits, req)
	fn, err := f.hitFn, f.err
	f.mu.Unlock()
	if err != nil {
		return protocol.HitReply{}, err
	}
	if fn != nil {
		return fn(ctx, req)
	}
	rep := protocol.HitReply{Result: protocol.ResultOK, Revision: 7}
	if req.Claim != nil {
		rep.HookID = req.Claim.HookID
	}
	return rep, nil
}

// counter runs op on f's counts under its lock, unless err fails every
// call.
func counter[R any](f *fakeQuota, op func(counts map[[2]string]int64) R) (R, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		var zero R
		return zero, f.err
	}
	return op(f.counts), nil
}

func (f *fakeQuota) Reset(_ context.Context, tenant string) error {
	_, err := counter(f, func(map[[2]string]int64) struct{} { return struct{}{} })
	return err
}

func (f *fakeQuota) Reserve(_ context.Context, req protocol.ReserveRequest) (protocol.ReserveReply, error) {
	return counter(f, func(counts map[[2]string]int64) protocol.ReserveReply {
		k := [2]string{req.Principal, req.Key}
		if counts[k] >= req.Max {
			return protocol.ReserveReply{Granted: false, Count: counts[k]}
		}
		counts[k]++
		return protocol.ReserveReply{Granted: true, Count: counts[k]}
	})
}

func (f *fakeQuota) Release(_ context.Context, req protocol.CounterRequest) (protocol.CountReply, error) {
	return counter(f, func(counts map[[2]string]int64) protocol.CountReply {
		k := [2]string{req.Principal, req.Key}
		if counts[k] > 0 {
			counts[k]--
		}
		return protocol.CountReply{Count: counts[k]}
	})
}

func (f *fakeQuota) Count(_ context.Context, req protocol.CounterRequest) (protocol.CountReply, error) {
	return counter(f, func(counts map[[2]string]int64) protocol.CountReply {
		return protocol.CountReply{Count: counts[[2]string{req.Principal, req.Key}]}
	})
}

func (f *fakeQuota) Settle(ctx context.Context, req protocol.SettleRequest) error {
	f.mu.Lock()
	store, err := f.store, f.err
	f.mu.Unlock()
	if err != nil {
		return err
	}
	id := claims.ID{Tenant: req.Tenant, Source: req.Source, Key: req.Key}
	return store.Settle(ctx, id, req.HookID, req.Revision, claims.CommittedTTL(req.TTLMs, protocol.DefaultCommittedTTL))
}

func (f *fakeQuota) setHit(fn func(ctx context.Context, req protocol.HitRequest) (protocol.HitReply, error)) {
	f.mu.Lock()
	f.hitFn = fn
	f.mu.Unlock()
}

func (f *fakeQuota) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fakeQuota) lastHit() protocol.HitRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[len(f.hits)-1]
}

var _ Quota = (*fakeQuota)(nil)

// env is a running service on an embedded server with the real claims,
// replay and cooldown stores, the quota fake, and a second connection that
// plays a service written in another language: it only sends raw JSON.
type env struct {
	t        *testing.T
	kit      *testkit.Kit
	client   *nats.Conn
	svc      *Service
	quota    *fakeQuota
	claims   *claims.KV
	replay   *claims.KVReplay
	cooldown *cooldown.Store
	worker   *owner.Worker // with realQuota
}

const replayCapacity = 4

// testPartitions keeps the real quota worker's start-up short.
const testPartitions = 8

// realQuota (a start mutator) serves quota.* with the real quota package: a
// Worker owning every partition (leases and counts buckets on the kit, the
// env's claims store) and the quota Router.
func (e *env) realQuota(c *Config) {
	t := e.t
	t.Helper()
	w, qc := ownerkit.Serving(t, e.kit, e.claims, testPartitions, owner.WithLeaseTTL(2*time.Second))
	e.worker = w
	c.Quota, c.Partitions = qc, testPartitions
}

// newKVReplay and newCooldown construct a store, failing the test on an
// error.
func newKVReplay(t testing.TB, b *kvstore.Bucket) *claims.KVReplay {
	t.Helper()
	return testkit.Must(claims.NewKVReplay(b))(t)
}

func newCooldown(t testing.TB, b *kvstore.Bucket) *cooldown.Store {
	t.Helper()
	return testkit.Must(cooldown.New(b))(t)
}

// start runs the service with the fake Quota; mutate may change the config
// (e.g. e.realQuota to use a real quota worker and client).
func start(t *testing.T, mutate func(*env, *Config)) *env {
	t.Helper()
	kit := testkit.New(t)
	names := kvstore.BucketNames(protocol.DefaultPrefix)
	e := &env{
		t:        t,
		kit:      kit,
		quota:    newFakeQuota(),
		claims:   testkit.ClaimsKV(t, kit.Bucket(t, kvstore.BucketConfig{Name: names.Claims})),
		replay:   newKVReplay(t, kit.Bucket(t, claims.ReplayBucketConfig(names.Replay, replayCapacity, 1))),
		cooldown: newCooldown(t, kit.Bucket(t, cooldown.BucketConfig(protocol.DefaultPrefix, 1))),
	}
	cfg := Config{Quota: e.quota, Claims: e.claims, Replay: e.replay, Cooldown: e.cooldown}
	if mutate != nil {
		mutate(e, &cfg)
	}
	e.quota.store = cfg.Claims
	client, err := kit.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	e.client = client
	svc, err := New(kit.Conn, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := svc.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	e.svc = svc
	return e
}

// call sends body to subject as a plain NATS request.
func (e *env) call(t *testing.T, subject, body string) *nats.Msg {
	t.Helper()
	m, err := e.client.Request(subject, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s %s: %v", subject, body, err)
	}
	return m
}

// callLater sends body to subject from a goroutine of its own (with a
// 10 s timeout): the reply arrives on the channel, nil after an error
// (reported as what's).
func (e *env) callLater(t *testing.T, what, subject, body string) <-chan *nats.Msg {
	ch := make(chan *nats.Msg, 1)
	go func() {
		m, err := e.client.Request(subject, []byte(body), 10*time.Second)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		ch <- m
	}()
	return ch
}

// ok sends a request and decodes the successful reply.
func (e *env) ok(t *testing.T, subject, body string) map[string]any {
	t.Helper()
	return okBody(t, e.call(t, subject, body))
}

func okBody(t *testing.T, m *nats.Msg) map[string]any {
	t.Helper()
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("want a reply, got error %s %q", code, m.Header.Get(micro.ErrorHeader))
	}
	var got map[string]any
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatalf("reply %q: %v", m.Data, err)
	}
	return got
}

// fails sends a request and checks the error headers: the code, and a
// reason that starts with reason.
func (e *env) fails(t *testing.T, subject, body, code, reason string) {
	t.Helper()
	failsWith(t, e.call(t, subject, body), code, reason)
}

func failsWith(t *testing.T, m *nats.Msg, code, reason string) {
	t.Helper()
	gotCode, gotReason := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
	if gotCode != code || !strings.HasPrefix(gotReason, reason) {
		t.Fatalf("want %s %q…, got %q %q (body %q)", code, reason, gotCode, gotReason, m.Data)
	}
	if len(m.Data) != 0 {
		t.Fatalf("error reply has a body: %q", m.Data)
	}
}

func wantJSON(t *testing.T, got map[string]any, want string) {
	t.Helper()
	var w map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Fatalf("reply\n got %s\nwant %s", g, want)
	}
}

func wantKeys(t *testing.T, got map[string]any, keys ...string) {
	t.Helper()
	var have []string
	for k := range got {
		have = append(have, k)
	}
	sort.Strings(have)
	sort.Strings(keys)
	if !reflect.DeepEqual(have, keys) {
		t.Fatalf("reply keys %v, want %v", have, keys)
	}
}

const (
	subHit      = "sluice.v1.quota.hit"
	subReset    = "sluice.v1.quota.reset"
	subReserve  = "sluice.v1.quota.reserve"
	subQRelease = "sluice.v1.quota.release"
	subCount    = "sluice.v1.quota.count"
	subSettle   = "sluice.v1.claims.settle"
	subCRelease = "sluice.v1.claims.release"
	subGet      = "sluice.v1.claims.get"
	subReplay   = "sluice.v1.replay.claim"
	subRecord   = "sluice.v1.cooldown.record"
	subPenalize = "sluice.v1.cooldown.penalize"
	subLoad     = "sluice.v1.cooldown.load"
)

var allSubjects = append([]string{
	subHit, subReset, subReserve, subQRelease, subCount,
	subSettle, subCRelease, subGet, subReplay,
	subRecord, subPenalize, subLoad,
}, scopedSubjects(subHit, subReserve, subQRelease, subCount, subSettle, subCRelease, subGet, subReplay, subRecord, subPenalize, subLoad)...)

// scopedSubjects are the tenant-scoped twins of subjects (quota.reset has
// none).
func scopedSubjects(subjects ...string) []string {
	out := make([]string, len(subjects))
	for i, s := range subjects {
		out[i] = strings.Replace(s, "sluice.v1.", "sluice.v1.t.*.", 1)
	}
	return out
}

// ---- discovery ----

func TestDiscovery(t *testing.T) {
	e := start(t, func(_ *env, c *Config) { c.Partitions = 16 })

	m := e.call(t, "$SRV.PING.sluice", "")
	ping := okBody(t, m)
	if ping["name"] != "sluice" || ping["type"] != micro.PingResponseType || ping["version"] != Version {
		t.Fatalf("ping: %v", ping)
	}

	var info micro.Info
	if err := json.Unmarshal(e.call(t, "$SRV.INFO.sluice", "").Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "sluice" || info.Version != Version {
		t.Fatalf("info identity: %+v", info.ServiceIdentity)
	}
	wantMeta := map[string]string{"partitions": "16", "version": Version, "prefix": "sluice"}
	if !reflect.DeepEqual(info.Metadata, wantMeta) {
		t.Fatalf("info metadata %v, want %v", info.Metadata, wantMeta)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
		if ep.QueueGroup != micro.DefaultQueueGroup {
			t.Errorf("%s: queue group %q", ep.Subject, ep.QueueGroup)
		}
	}
	if !reflect.DeepEqual(subjects, allSubjects) {
		t.Fatalf("endpoints\n got %v\nwant %v", subjects, allSubjects)
	}
	if got := e.svc.Subjects(); !reflect.DeepEqual(got, allSubjects) {
		t.Fatalf("Subjects() = %v", got)
	}

	// STATS answers and its per-endpoint data counts the service's errors.
	// (micro counts a request after its handler returns, which may be just
	// after the reply went out: poll.)
	e.fails(t, subReplay, `{}`, "400", protocol.InvalidRequest.Code)
	testkit.Eventually(t, 2*time.Second, func() bool {
		var stats micro.Stats
		if err := json.Unmarshal(e.call(t, "$SRV.STATS.sluice", "").Data, &stats); err != nil {
			t.Fatal(err)
		}
		for _, ep := range stats.Endpoints {
			if ep.Subject != subReplay {
				continue
			}
			var d EndpointStats
			if err := json.Unmarshal(ep.Data, &d); err != nil {
				t.Fatalf("stats data %q: %v", ep.Data, err)
			}
			return d.NumErrors == 1 && strings.HasPrefix(d.LastError, "400:invalid_request") && ep.NumRequests == 1
		}
		t.Fatal("no stats for replay.claim")
		return false
	}, "STATS counts the replay.claim request and its error")
}

func TestOnlyProvidedDependencies(t *testing.T) {
	kit := testkit.New(t)
	names := kvstore.BucketNames(protocol.DefaultPrefix)
	replay := newKVReplay(t, kit.Bucket(t, claims.ReplayBucketConfig(names.Replay, 10, 1)))
	svc, err := New(kit.Conn, Config{Replay: replay})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if got := svc.Subjects(); !reflect.DeepEqual(got, append([]string{subReplay}, scopedSubjects(subReplay)...)) {
		t.Fatalf("subjects %v", got)
	}
	if _, err := kit.Conn.Request(subHit, []byte(`{}`), time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("quota.hit without Quota: want no responders, got %v", err)
	}
}

func TestCustomPrefix(t *testing.T) {
	e := start(t, func(_ *env, c *Config) { c.Prefix = "acme.sl" })
	got := e.ok(t, "acme.sl.v1.replay.claim", `{"namespace":"n","key":"k","retain_until":4102444800}`)
	wantJSON(t, got, `{"result":"claimed"}`)
	if e.svc.Info().Metadata["prefix"] != "acme.sl" {
		t.Fatalf("metadata %v", e.svc.Info().Metadata)
	}
	for _, s := range e.svc.Subjects() {
		if !strings.HasPrefix(s, "acme.sl.v1.") {
			t.Fatalf("subject %s", s)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	kit := testkit.New(t)
	fq := newFakeQuota()
	if _, err := New(nil, Config{Quota: fq}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil conn: %v", err)
	}
	qc, err := quota.NewRouter(kit.Conn, quota.WithPartitions(8))
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]Config{
		"no dependency":          {},
		"prefix with space":      {Quota: fq, Prefix: "a b"},
		"prefix wildcard":        {Quota: fq, Prefix: "a.>"},
		"negative partitions":    {Quota: fq, Partitions: -1},
		"too many partitions":    {Quota: fq, Partitions: quota.MaxPartitions + 1},
		"not the client's P":     {Quota: qc, Partitions: 16},
		"negative store timeout": {Quota: fq, StoreTimeout: -time.Second},
		"negative max in flight": {Quota: fq, MaxInFlight: -1},
	} {
		if _, err := New(kit.Conn, cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: want ErrInvalidConfig, got %v", name, err)
		}
	}
	if _, err := New(kit.Conn, Config{Quota: fq, Version: "not-semver"}); err == nil {
		t.Error("non-SemVer version accepted")
	}
	// The partition count defaults to the quota Router's.
	svc, err := New(kit.Conn, Config{Quota: qc})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if got := svc.Info().Metadata["partitions"]; got != "8" {
		t.Fatalf("partitions metadata %q, want the client's 8", got)
	}
}

// ---- quota.* ----

// hooksCharge is a "hooks" charge of tenant with the given burst at a rate
// so slow (1/h) that nothing refills during a test.
func hooksCharge(tenant string, burst int64) string {
	inc := int64(time.Hour / time.Microsecond)
	return fmt.Sprintf(`{"kind":"hooks","tenant":%q,"increment_us":%d,"capacity_us":%d}`, tenant, inc, inc*burst)
}

func num(t *testing.T, got map[string]any, key string) int64 {
	t.Helper()
	f, ok := got[key].(float64)
	if !ok {
		t.Fatalf("%s: not a number in %v", key, got)
	}
	return int64(f)
}

// TestQuotaHit drives quota.hit and claims.settle against the real quota
// worker and claims store: ok (with the limits extension), pending,
// duplicate, rate_limited, and reset.
func TestQuotaHit(t *testing.T) {
	e := start(t, (*env).realQuota)
	claimHit := func(key, hook string) string {
		return `{"charges":[` + hooksCharge("acme", 3) + `],` +
			`"claim":{"tenant":"acme","source":"gh","key":"` + key + `","hook_id":"` + hook + `","ttl_ms":60000,"pending_ttl_ms":30000},` +
			`"future_field":{"x":1}}`
	}

	// ok: the charge is taken and the claim is pending for h1.
	got := e.ok(t, subHit, claimHit("d-1", "h1"))
	wantKeys(t, got, "result", "hook_id", "retry_after_ms", "revision", "limits")
	if got["result"] != "ok" || got["hook_id"] != "h1" || num(t, got, "retry_after_ms") != 0 || num(t, got, "revision") < 1 {
		t.Fatalf("ok: %v", got)
	}
	limits, _ := got["limits"].([]any)
	if len(limits) != 1 {
		t.Fatalf("limits: %v", got["limits"])
	}
	if l, _ := limits[0].(map[string]any); l["kind"] != "hooks" || l["remaining"] != float64(2) {
		t.Fatalf("limits[0]: %v", limits[0])
	}
	rev := num(t, got, "revision")
	if st := e.ok(t, subGet, `{"tenant":"acme","source":"gh","key":"d-1"}`); st["state"] != "pending" || st["hook_id"] != "h1" || num(t, st, "revision") != rev {
		t.Fatalf("claims.get after the hit: %v", st)
	}

	// pending: another hook id on the same key while h1 holds it.
	got = e.ok(t, subHit, claimHit("d-1", "h2"))
	wantKeys(t, got, "result", "hook_id", "retry_after_ms", "revision")
	if got["result"] != "pending" || got["hook_id"] != "h1" || num(t, got, "revision") != rev {
		t.Fatalf("pending: %v", got)
	}
	if ra := num(t, got, "retry_after_ms"); ra < 1 || ra > 30000 {
		t.Fatalf("pending retry_after_ms %d", ra)
	}

	// settle over the wire with the hit's revision, then: duplicate.
	wantJSON(t, e.ok(t, subSettle, fmt.Sprintf(`{"tenant":"acme","source":"gh","key":"d-1","hook_id":"h1","revision":%d}`, rev)), `{"ok":true}`)
	got = e.ok(t, subHit, claimHit("d-1", "h3"))
	wantKeys(t, got, "result", "hook_id", "retry_after_ms", "revision")
	if got["result"] != "duplicate" || got["hook_id"] != "h1" || num(t, got, "retry_after_ms") != 0 || num(t, got, "revision") <= rev {
		t.Fatalf("duplicate: %v", got)
	}

	// pending and duplicate spent nothing: two of the burst of 3 are left.
	noClaim := `{"charges":[` + hooksCharge("acme", 3) + `],"claim":null}`
	for i := range 2 {
		got = e.ok(t, subHit, noClaim)
		wantKeys(t, got, "result", "hook_id", "retry_after_ms", "revision", "limits")
		if got["result"] != "ok" || got["hook_id"] != "" || num(t, got, "revision") != 0 {
			t.Fatalf("hit %d without claim: %v", i, got)
		}
	}
	got = e.ok(t, subHit, noClaim)
	wantKeys(t, got, "result", "hook_id", "retry_after_ms", "revision", "limits")
	if got["result"] != "rate_limited" || got["hook_id"] != "" || num(t, got, "revision") != 0 {
		t.Fatalf("rate_limited: %v", got)
	}
	if ra := num(t, got, "retry_after_ms"); ra < 1 || ra > time.Hour.Milliseconds() {
		t.Fatalf("rate_limited retry_after_ms %d", ra)
	}
	// A denied hit with a claim takes no claim.
	got = e.ok(t, subHit, claimHit("d-2", "h4"))
	if got["result"] != "rate_limited" {
		t.Fatalf("denied hit with a claim: %v", got)
	}
	wantJSON(t, e.ok(t, subGet, `{"tenant":"acme","source":"gh","key":"d-2"}`), `{"state":"absent","hook_id":"","revision":0,"expires_in_ms":0}`)

	// reset: the tenant's buckets are full again.
	wantJSON(t, e.ok(t, subReset, `{"tenant":"acme"}`), `{"ok":true}`)
	if got = e.ok(t, subHit, noClaim); got["result"] != "ok" {
		t.Fatalf("after reset: %v", got)
	}
}

// TestQuotaOwnerDown: with the quota worker stopped nobody owns the
// partitions, and quota.* answer 503 within the store timeout.
func TestQuotaOwnerDown(t *testing.T) {
	e := start(t, func(e *env, c *Config) {
		e.realQuota(c)
		c.StoreTimeout = 200 * time.Millisecond
	})
	wantJSON(t, e.ok(t, subCount, `{"principal":"p","key":"k"}`), `{"count":0}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.worker.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ subject, body string }{
		{subHit, `{"charges":[` + hooksCharge("acme", 1) + `]}`},
		{subReset, `{"tenant":"acme"}`},
		{subReserve, `{"principal":"p","key":"k","max":1}`},
		{subQRelease, `{"principal":"p","key":"k"}`},
		{subCount, `{"principal":"p","key":"k"}`},
	} {
		t0 := time.Now()
		e.fails(t, c.subject, c.body, "503", protocol.StoreUnavailable.Code)
		if d := time.Since(t0); d < 150*time.Millisecond || d > 2*time.Second {
			t.Errorf("%s answered after %v, want about the 200 ms store timeout", c.subject, d)
		}
	}
}

// TestQuotaHitReplies maps each quota result onto the wire (fake Quota: the
// values are fixed, including a node-local answer without a claim, which
// is passed on).
func TestQuotaHitReplies(t *testing.T) {
	e := start(t, nil)
	const hit = `{"charges":[{"kind":"hooks","tenant":"acme","increment_us":100000,"capacity_us":2000000},` +
		`{"kind":"bytes","tenant":"acme","increment_us":5,"capacity_us":10}],` +
		`"claim":{"tenant":"acme","source":"gh","key":"d-1","hook_id":"h1","ttl_ms":60000,"pending_ttl_ms":30000}}`
	t.Run("request passed on", func(t *testing.T) {
		wantJSON(t, e.ok(t, subHit, hit), `{"result":"ok","hook_id":"h1","retry_after_ms":0,"revision":7}`)
		want := protocol.HitRequest{
			Charges: []protocol.Charge{
				{Kind: "hooks", Tenant: "acme", IncrementUs: 100000, CapacityUs: 2000000},
				{Kind: "bytes", Tenant: "acme", IncrementUs: 5, CapacityUs: 10},
			},
			Claim: &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: "d-1", HookID: "h1", TTLMs: 60000, PendingTTLMs: 30000},
		}
		if got := e.quota.lastHit(); !reflect.DeepEqual(got, want) {
			t.Fatalf("quota got %+v", got)
		}
	})
	results := []struct {
		name  string
		reply protocol.HitReply
		want  string
	}{
		{"rate_limited", protocol.HitReply{Result: protocol.ResultRateLimited, RetryAfterMs: 250,
			Limits: []protocol.LimitState{{Kind: "hooks", Remaining: 0, ResetAfterMs: 250}}},
			`{"result":"rate_limited","hook_id":"","retry_after_ms":250,"revision":0,"limits":[{"kind":"hooks","remaining":0,"reset_ms":250}]}`},
		{"duplicate", protocol.HitReply{Result: protocol.ResultDuplicate, HookID: "h0", Revision: 3},
			`{"result":"duplicate","hook_id":"h0","retry_after_ms":0,"revision":3}`},
		{"pending", protocol.HitReply{Result: protocol.ResultPending, HookID: "h0", RetryAfterMs: 1200, Revision: 3},
			`{"result":"pending","hook_id":"h0","retry_after_ms":1200,"revision":3}`},
	}
	for _, tc := range results {
		t.Run(tc.name, func(t *testing.T) {
			e.quota.setHit(func(context.Context, protocol.HitRequest) (protocol.HitReply, error) { return tc.reply, nil })
			defer e.quota.setHit(nil)
			wantJSON(t, e.ok(t, subHit, hit), tc.want)
		})
	}
	t.Run("fallback answer without claim", func(t *testing.T) {
		e.quota.setHit(func(context.Context, protocol.HitRequest) (protocol.HitReply, error) {
			return protocol.HitReply{Result: protocol.ResultOK, Fallback: true}, nil
		})
		defer e.quota.setHit(nil)
		got := e.ok(t, subHit, `{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1,"capacity_us":1}]}`)
		wantJSON(t, got, `{"result":"ok","hook_id":"","retry_after_ms":0,"revision":0}`)
	})
}

func TestQuotaHitInvalid(t *testing.T) {
	e := start(t, nil)
	charge := func(tenant string, inc, capacity any) string {
		return fmt.Sprintf(`{"kind":"hooks","tenant":%q,"increment_us":%v,"capacity_us":%v}`, tenant, inc, capacity)
	}
	claim := `{"tenant":"acme","source":"gh","key":"k","hook_id":"h"}`
	long := strings.Repeat("t", MaxNameBytes+1)
	cases := []struct{ name, body, reason string }{
		{"malformed JSON", `{"charges":[`, "malformed JSON"},
		{"empty body", ``, "malformed JSON"},
		{"trailing data", `{"claim":` + claim + `} {}`, "malformed JSON"},
		{"null", `null`, "request must be a JSON object"},
		{"array", `[]`, "request must be a JSON object"},
		{"string", `"hit"`, "request must be a JSON object"},
		{"empty object", `{}`, "no charges and no claim"},
		{"wrong case ignored", `{"Charges":[` + charge("acme", 1, 2) + `]}`, "no charges and no claim"},
		{"charges not an array", `{"charges":{}}`, "charges: want array, got object"},
		{"increment as string", `{"charges":[` + charge("acme", `"5"`, 10) + `]}`, "charges[0].increment_us: want integer, got string"},
		{"increment fractional", `{"charges":[` + charge("acme", 1.5, 10) + `]}`, "charges[0].increment_us: want integer"},
		{"capacity overflow", `{"charges":[` + charge("acme", 1, "99999999999999999999") + `]}`, "charges[0].capacity_us: want integer"},
		{"claim wrong type", `{"claim":"k"}`, "claim: want object, got string"},
		{"two tenants", `{"charges":[` + charge("a", 1, 2) + `,` + strings.Replace(charge("b", 1, 2), "hooks", "bytes", 1) + `]}`, "all charges must belong to one tenant"},
		{"charge for another tenant than the claim", `{"charges":[` + charge("other", 1, 2) + `],"claim":` + claim + `}`, "all charges must belong to one tenant"},
		{"increment over capacity", `{"charges":[` + charge("acme", 11, 10) + `]}`, "charges[0]: increment_us > capacity_us"},
		{"zero increment", `{"charges":[` + charge("acme", 0, 10) + `]}`, "charges[0]: increment_us and capacity_us must be > 0"},
		{"negative capacity", `{"charges":[` + charge("acme", 1, -10) + `]}`, "charges[0]: increment_us and capacity_us must be > 0"},
		{"missing tenant", `{"charges":[{"kind":"hooks","increment_us":1,"capacity_us":2}]}`, "charges[0].tenant is empty"},
		{"missing kind", `{"charges":[{"tenant":"a","increment_us":1,"capacity_us":2}]}`, "charges[0].kind must be 1..64 bytes"},
		{"long kind", `{"charges":[{"kind":"` + strings.Repeat("k", 65) + `","tenant":"a","increment_us":1,"capacity_us":2}]}`, "charges[0].kind must be 1..64 bytes"},
		{"tenant too long", `{"charges":[` + charge(long, 1, 2) + `]}`, "charges[0].tenant must be 1..256 bytes"},
		{"kind twice", `{"charges":[` + charge("a", 1, 2) + `,` + charge("a", 1, 2) + `]}`, "charges[1]: kind charged twice"},
		{"too many charges", `{"charges":[` + strings.Repeat(charge("a", 1, 2)+",", 16) + charge("a", 1, 2) + `]}`, "at most 16 charges"},
		{"claim without hook id", `{"claim":{"tenant":"acme","source":"gh","key":"k"}}`, "claim needs tenant, source, key and hook_id"},
		{"claim negative ttl", `{"claim":{"tenant":"acme","source":"gh","key":"k","hook_id":"h","pending_ttl_ms":-1}}`, "claim ttl_ms and pending_ttl_ms must be >= 0"},
		{"claim source too long", `{"claim":{"tenant":"acme","source":"` + long + `","key":"k","hook_id":"h"}}`, "claim: source must be 1..256 bytes"},
		{"claim hook id too long", `{"claim":{"tenant":"acme","source":"gh","key":"k","hook_id":"` + strings.Repeat("h", protocol.MaxHookIDBytes+1) + `"}}`, "claim: hook id must be 1..256 bytes"},
	}
	e.quota.mu.Lock()
	n := len(e.quota.hits)
	e.quota.mu.Unlock()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.fails(t, subHit, tc.body, "400", protocol.InvalidRequest.Code+": "+tc.reason)
		})
	}
	e.quota.mu.Lock()
	defer e.quota.mu.Unlock()
	if len(e.quota.hits) != n {
		t.Fatalf("an invalid hit reached the quota store: %+v", e.quota.hits[n:])
	}
}

func TestQuotaHitUnavailable(t *testing.T) {
	e := start(t, func(_ *env, c *Config) { c.StoreTimeout = 100 * time.Millisecond })
	const hit = `{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1,"capacity_us":2}],` +
		`"claim":{"tenant":"acme","source":"gh","key":"k","hook_id":"h"}}`

	t.Run("owner unavailable", func(t *testing.T) {
		e.quota.setErr(fmt.Errorf("%w: partition 3: no responders", protocol.ErrUnavailable))
		defer e.quota.setErr(nil)
		e.fails(t, subHit, hit, "503", protocol.StoreUnavailable.Code)
		e.fails(t, subReset, `{"tenant":"acme"}`, "503", protocol.StoreUnavailable.Code)
		e.fails(t, subReserve, `{"principal":"p","key":"k","max":1}`, "503", protocol.StoreUnavailable.Code)
		e.fails(t, subQRelease, `{"principal":"p","key":"k"}`, "503", protocol.StoreUnavailable.Code)
		e.fails(t, subCount, `{"principal":"p","key":"k"}`, "503", protocol.StoreUnavailable.Code)
	})
	t.Run("deadline", func(t *testing.T) {
		e.quota.setHit(func(ctx context.Context, _ protocol.HitRequest) (protocol.HitReply, error) {
			<-ctx.Done() // an owner that never answers
			return protocol.HitReply{}, ctx.Err()
		})
		defer e.quota.setHit(nil)
		t0 := time.Now()
		e.fails(t, subHit, hit, "503", protocol.StoreUnavailable.Code)
		if d := time.Since(t0); d < 100*time.Millisecond || d > 2*time.Second {
			t.Fatalf("answered after %v, want about the 100 ms store timeout", d)
		}
	})
	t.Run("unexpected error", func(t *testing.T) {
		e.quota.setErr(errors.New("boom"))
		defer e.quota.setErr(nil)
		e.fails(t, subHit, hit, "500", protocol.InternalError.Code)
	})
	t.Run("panic", func(t *testing.T) {
		e.quota.setHit(func(context.Context, protocol.HitRequest) (protocol.HitReply, error) { panic("bug") })
		defer e.quota.setHit(nil)
		e.fails(t, subHit, hit, "500", protocol.InternalError.Code)
	})
	t.Run("invalid from the quota package", func(t *testing.T) {
		e.quota.setErr(fmt.Errorf("%w: owner says no", protocol.ErrInvalid))
		defer e.quota.setErr(nil)
		e.fails(t, subHit, hit, "400", protocol.InvalidRequest.Code+": owner says no")
	})
}

// TestQuotaHitConcurrent: a hit stuck on a slow owner does not hold up hits
// for other tenants (each request runs in its own goroutine).
func TestQuotaHitConcurrent(t *testing.T) {
	e := start(t, func(_ *env, c *Config) { c.StoreTimeout = 10 * time.Second })
	entered, gate := make(chan struct{}), make(chan struct{})
	e.quota.setHit(func(ctx context.Context, req protocol.HitRequest) (protocol.HitReply, error) {
		if req.Tenant() == "slow" {
			close(entered)
			select {
			case <-gate:
			case <-ctx.Done():
				return protocol.HitReply{}, ctx.Err()
			}
		}
		return protocol.HitReply{Result: protocol.ResultOK}, nil
	})
	slow := e.callLater(t, "slow request", subHit, `{"charges":[{"kind":"hooks","tenant":"slow","increment_us":1,"capacity_us":1}]}`)
	<-entered
	for i := range 20 {
		m, err := e.client.Request(subHit, fmt.Appendf(nil, `{"charges":[{"kind":"hooks","tenant":"t%d","increment_us":1,"capacity_us":1}]}`, i), time.Second)
		if err != nil {
			t.Fatalf("fast request %d behind the slow one: %v", i, err)
		}
		okBody(t, m)
	}
	close(gate)
	if m := <-slow; m != nil {
		wantJSON(t, okBody(t, m), `{"result":"ok","hook_id":"","retry_after_ms":0,"revision":0}`)
	}
}

// TestQuotaCounters drives reserve/release/count against the real quota
// worker (counts written through to KV), plus their 400s.
func TestQuotaCounters(t *testing.T) {
	e := start(t, (*env).realQuota)
	const reserve = `{"principal":"svc-a","key":"gpu","max":2,"ttl_ms":60000}`
	wantJSON(t, e.ok(t, subReserve, reserve), `{"granted":true,"count":1}`)
	wantJSON(t, e.ok(t, subReserve, `{"principal":"svc-a","key":"gpu","max":2}`), `{"granted":true,"count":2}`)
	wantJSON(t, e.ok(t, subReserve, reserve), `{"granted":false,"count":2}`)
	wantJSON(t, e.ok(t, subCount, `{"principal":"svc-a","key":"gpu"}`), `{"count":2}`)
	wantJSON(t, e.ok(t, subQRelease, `{"principal":"svc-a","key":"gpu"}`), `{"count":1}`)
	wantJSON(t, e.ok(t, subQRelease, `{"principal":"svc-a","key":"gpu"}`), `{"count":0}`)
	wantJSON(t, e.ok(t, subCount, `{"principal":"svc-a","key":"gpu"}`), `{"count":0}`)
	// Counters are per (principal, key).
	wantJSON(t, e.ok(t, subReserve, `{"principal":"svc-b","key":"gpu","max":1}`), `{"granted":true,"count":1}`)
	wantJSON(t, e.ok(t, subReserve, `{"principal":"svc-a","key":"cpu","max":1}`), `{"granted":true,"count":1}`)
	wantJSON(t, e.ok(t, subCount, `{"principal":"svc-a","key":"gpu"}`), `{"count":0}`)

	long := strings.Repeat("p", MaxNameBytes+1)
	cases := []struct{ name, subject, body, reason string }{
		{"reset missing tenant", subReset, `{}`, "tenant must be 1..256 bytes"},
		{"reset tenant wrong type", subReset, `{"tenant":7}`, "tenant: want string, got number"},
		{"reset tenant too long", subReset, `{"tenant":"` + long + `"}`, "tenant must be 1..256 bytes"},
		{"reserve max as string", subReserve, `{"principal":"p","key":"k","max":"3"}`, "max: want integer, got string"},
		{"reserve max missing", subReserve, `{"principal":"p","key":"k"}`, "max must be >= 1, got 0"},
		{"reserve max zero", subReserve, `{"principal":"p","key":"k","max":0}`, "max must be >= 1, got 0"},
		{"reserve max negative", subReserve, `{"principal":"p","key":"k","max":-1}`, "max must be >= 1, got -1"},
		{"reserve negative ttl", subReserve, `{"principal":"p","key":"k","max":1,"ttl_ms":-5}`, "ttl_ms must be >= 0"},
		{"reserve missing principal", subReserve, `{"key":"k","max":1}`, "principal must be 1..256 bytes"},
		{"reserve principal too long", subReserve, `{"principal":"` + long + `","key":"k","max":1}`, "principal must be 1..256 bytes"},
		{"release missing key", subQRelease, `{"principal":"p"}`, "key must be 1..256 bytes"},
		{"release key wrong type", subQRelease, `{"principal":"p","key":["k"]}`, "key: want string, got array"},
		{"count malformed", subCount, `{"principal":`, "malformed JSON"},
		{"count not an object", subCount, `42`, "request must be a JSON object, got number"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.fails(t, tc.subject, tc.body, "400", protocol.InvalidRequest.Code+": "+tc.reason)
		})
	}
}

// ---- claims.* ----

// TestClaims drives claims.* with the real quota worker: claims.settle is
// the partition owner's settle, which reads the holder of a claim it did
// not grant (this one is taken in the store directly), so another hook
// id's settle at the holder's revision is refused.
func TestClaims(t *testing.T) {
	e := start(t, func(e *env, c *Config) { e.realQuota(c) })
	ctx := testkit.Context(t)
	id := claims.ID{Tenant: "acme", Source: "gh", Key: "delivery-1"}
	res, err := e.claims.Claim(ctx, id, "h1", 30*time.Second)
	if err != nil || res.Outcome != claims.OK {
		t.Fatalf("claim: %+v %v", res, err)
	}
	rev := res.Revision
	body := func(hook string, rev uint64) string {
		return fmt.Sprintf(`{"tenant":"acme","source":"gh","key":"delivery-1","hook_id":%q,"revision":%d}`, hook, rev)
	}
	const get = `{"tenant":"acme","source":"gh","key":"delivery-1"}`

	got := e.ok(t, subGet, get)
	wantKeys(t, got, "state", "hook_id", "revision", "expires_in_ms")
	if got["state"] != "pending" || got["hook_id"] != "h1" || got["revision"] != float64(rev) {
		t.Fatalf("get pending: %v", got)
	}
	if ms := got["expires_in_ms"].(float64); ms <= 0 || ms > 30000 {
		t.Fatalf("pending expires_in_ms %v", ms)
	}

	e.fails(t, subSettle, body("h1", rev+1), "409", protocol.ClaimLost.Code)
	e.fails(t, subSettle, body("h2", rev), "409", protocol.ClaimLost.Code)
	e.fails(t, subCRelease, body("h2", rev), "409", protocol.ClaimLost.Code)
	wantJSON(t, e.ok(t, subSettle, body("h1", rev)), `{"ok":true}`)
	e.fails(t, subSettle, body("h1", rev), "409", protocol.ClaimLost.Code) // settled already

	got = e.ok(t, subGet, get)
	if got["state"] != "committed" || got["hook_id"] != "h1" {
		t.Fatalf("get committed: %v", got)
	}
	// Settled with the default dedupe TTL, 72 h.
	if ms := got["expires_in_ms"].(float64); ms < float64((72*time.Hour-time.Minute).Milliseconds()) || ms > float64((72*time.Hour).Milliseconds()) {
		t.Fatalf("committed expires_in_ms %v, want about 72 h", ms)
	}
	crev := uint64(got["revision"].(float64))
	wantJSON(t, e.ok(t, subCRelease, body("h1", crev)), `{"ok":true}`)
	wantJSON(t, e.ok(t, subGet, get), `{"state":"absent","hook_id":"","revision":0,"expires_in_ms":0}`)
	e.fails(t, subCRelease, body("h1", crev), "409", protocol.ClaimLost.Code) // nothing left to release

	t.Run("settle ttl_ms extension", func(t *testing.T) {
		id := claims.ID{Tenant: "acme", Source: "gh", Key: "delivery-2"}
		res, err := e.claims.Claim(ctx, id, "h9", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b := fmt.Sprintf(`{"tenant":"acme","source":"gh","key":"delivery-2","hook_id":"h9","revision":%d,"ttl_ms":10000}`, res.Revision)
		wantJSON(t, e.ok(t, subSettle, b), `{"ok":true}`)
		got := e.ok(t, subGet, `{"tenant":"acme","source":"gh","key":"delivery-2"}`)
		if ms := got["expires_in_ms"].(float64); got["state"] != "committed" || ms <= 0 || ms > 10000 {
			t.Fatalf("get: %v", got)
		}
	})
	t.Run("release pending", func(t *testing.T) {
		id := claims.ID{Tenant: "acme", Source: "gh", Key: "delivery-3"}
		res, err := e.claims.Claim(ctx, id, "h3", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b := fmt.Sprintf(`{"tenant":"acme","source":"gh","key":"delivery-3","hook_id":"h3","revision":%d}`, res.Revision)
		wantJSON(t, e.ok(t, subCRelease, b), `{"ok":true}`)
		if st, _ := e.claims.Get(ctx, id); st.State != protocol.StateAbsent {
			t.Fatalf("after release: %+v", st)
		}
	})
}

func TestClaimsInvalid(t *testing.T) {
	e := start(t, nil)
	long := strings.Repeat("s", protocol.MaxNameBytes+1)
	cases := []struct{ name, subject, body, reason string }{
		{"settle revision 0", subSettle, `{"tenant":"a","source":"s","key":"k","hook_id":"h","revision":0}`, "revision must be >= 1"},
		{"settle revision missing", subSettle, `{"tenant":"a","source":"s","key":"k","hook_id":"h"}`, "revision must be >= 1"},
		{"settle revision as string", subSettle, `{"tenant":"a","source":"s","key":"k","hook_id":"h","revision":"5"}`, "revision: want non-negative integer, got string"},
		{"settle revision negative", subSettle, `{"tenant":"a","source":"s","key":"k","hook_id":"h","revision":-1}`, "revision: want non-negative integer"},
		{"settle negative ttl", subSettle, `{"tenant":"a","source":"s","key":"k","hook_id":"h","revision":1,"ttl_ms":-1}`, "ttl_ms must be >= 0"},
		{"settle missing hook id", subSettle, `{"tenant":"a","source":"s","key":"k","revision":1}`, "hook id must be 1..256 bytes"},
		{"settle missing key", subSettle, `{"tenant":"a","source":"s","hook_id":"h","revision":1}`, "key must not be empty"},
		{"release missing tenant", subCRelease, `{"source":"s","key":"k","hook_id":"h","revision":1}`, "tenant must be 1..256 bytes"},
		{"release source too long", subCRelease, `{"tenant":"a","source":"` + long + `","key":"k","hook_id":"h","revision":1}`, "source must be 1..256 bytes"},
		{"release malformed", subCRelease, `{"tenant":"a",}`, "malformed JSON"},
		{"get missing source", subGet, `{"tenant":"a","key":"k"}`, "source must be 1..256 bytes"},
		{"get key wrong type", subGet, `{"tenant":"a","source":"s","key":12}`, "key: want string, got number"},
		{"get array", subGet, `[{"tenant":"a"}]`, "request must be a JSON object, got array"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.fails(t, tc.subject, tc.body, "400", protocol.InvalidRequest.Code+": "+tc.reason)
		})
	}
}

// slowClaims is a claims.Store that never answers before the deadline.
type slowClaims struct{ claims.Store }

func (slowClaims) Get(ctx context.Context, _ claims.ID) (claims.State, error) {
	<-ctx.Done()
	return claims.State{}, fmt.Errorf("%w: %w", protocol.ErrUnavailable, ctx.Err())
}

func (slowClaims) Settle(ctx context.Context, _ claims.ID, _ string, _ uint64, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestClaimsTimeouts(t *testing.T) {
	e := start(t, func(_ *env, c *Config) {
		c.Claims = slowClaims{}
		c.StoreTimeout = 50 * time.Millisecond
		c.SettleTimeout = 300 * time.Millisecond
	})
	t0 := time.Now()
	e.fails(t, subGet, `{"tenant":"a","source":"s","key":"k"}`, "503", protocol.StoreUnavailable.Code)
	if d := time.Since(t0); d > 250*time.Millisecond {
		t.Fatalf("get answered after %v, want about the 50 ms store timeout", d)
	}
	t0 = time.Now()
	e.fails(t, subSettle, `{"tenant":"a","source":"s","key":"k","hook_id":"h","revision":1}`, "503", protocol.StoreUnavailable.Code)
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Fatalf("settle answered after %v, want the 300 ms settle timeout", d)
	}
}

// ---- replay.claim ----

func TestReplay(t *testing.T) {
	e := start(t, nil)
	future := time.Now().Add(time.Hour).Unix()
	claim := func(ns, key string) string {
		return fmt.Sprintf(`{"namespace":%q,"key":%q,"retain_until":%d}`, ns, key, future)
	}
	wantJSON(t, e.ok(t, subReplay, claim("acme/gh", "m1")), `{"result":"claimed"}`)
	wantJSON(t, e.ok(t, subReplay, claim("acme/gh", "m1")), `{"result":"already_claimed"}`)
	wantJSON(t, e.ok(t, subReplay, claim("acme/other", "m1")), `{"result":"claimed"}`)
	// retain_until 0 is valid (long past: kept for the 1 s minimum).
	wantJSON(t, e.ok(t, subReplay, `{"namespace":"n","key":"zero","retain_until":0}`), `{"result":"claimed"}`)
	wantJSON(t, e.ok(t, subReplay, claim("acme/gh", "m2")), `{"result":"claimed"}`)
	// Capacity 4 reached: a new pair is full, a duplicate is still a duplicate.
	wantJSON(t, e.ok(t, subReplay, claim("acme/gh", "m3")), `{"result":"full"}`)
	wantJSON(t, e.ok(t, subReplay, claim("acme/gh", "m2")), `{"result":"already_claimed"}`)

	long := strings.Repeat("k", protocol.MaxNameBytes+1)
	longest := strings.Repeat("k", protocol.MaxNameBytes)
	cases := []struct{ name, body, reason string }{
		{"empty namespace", `{"namespace":"","key":"k","retain_until":1}`, "namespace must be 1..256 bytes"},
		{"missing namespace", `{"key":"k","retain_until":1}`, "namespace must be 1..256 bytes"},
		{"namespace too long", `{"namespace":"` + long + `","key":"k","retain_until":1}`, "namespace must be 1..256 bytes"},
		{"empty key", `{"namespace":"n","key":"","retain_until":1}`, "key must be 1..256 bytes"},
		{"key too long", `{"namespace":"n","key":"` + long + `","retain_until":1}`, "key must be 1..256 bytes"},
		{"retain_until missing", `{"namespace":"n","key":"k"}`, "retain_until is required"},
		{"retain_until null", `{"namespace":"n","key":"k","retain_until":null}`, "retain_until is required"},
		{"retain_until negative", `{"namespace":"n","key":"k","retain_until":-1}`, "retain_until must be in 0..253402300799"},
		{"retain_until too late", `{"namespace":"n","key":"k","retain_until":253402300800}`, "retain_until must be in 0..253402300799"},
		{"retain_until as string", `{"namespace":"n","key":"k","retain_until":"1"}`, "retain_until: want integer, got string"},
		{"retain_until fractional", `{"namespace":"n","key":"k","retain_until":1.5}`, "retain_until: want integer"},
		{"namespace wrong type", `{"namespace":true,"key":"k","retain_until":1}`, "namespace: want string, got boolean"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.fails(t, subReplay, tc.body, "400", protocol.InvalidRequest.Code+": "+tc.reason)
		})
	}
	// The bounds themselves are valid (the store is full by now: "full" is
	// a reply, not a 400).
	wantJSON(t, e.ok(t, subReplay, `{"namespace":"`+longest+`","key":"`+longest+`","retain_until":253402300799}`), `{"result":"full"}`)
}

// TestNoReplySubject: a request published without a reply subject is still
// applied (fire and forget).
func TestNoReplySubject(t *testing.T) {
	e := start(t, nil)
	if err := e.client.Publish(subReplay, []byte(`{"namespace":"n","key":"fire","retain_until":4102444800}`)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		m, err := e.client.Request(subReplay, []byte(`{"namespace":"n","key":"fire","retain_until":4102444800}`), time.Second)
		return err == nil && string(m.Data) == `{"result":"already_claimed"}`
	}, "published claim applied")
}

// ---- cooldown.* ----

func TestCooldown(t *testing.T) {
	e := start(t, nil)
	now := time.Now().UnixMilli()
	until := now + time.Hour.Milliseconds()

	record := fmt.Sprintf(`{"account":"acct","backend":"b1","observed_at_ms":%d,"snapshots":[`+
		`{"key":"tpm","label":"Tokens per minute","percent":70.5,"resets_at_ms":%d,"observed_at_ms":%d}]}`, now, now+60000, now)
	wantJSON(t, e.ok(t, subRecord, record), `{"ok":true}`)
	wantJSON(t, e.ok(t, subPenalize, fmt.Sprintf(`{"account":"acct","backend":"b2","until_ms":%d}`, until)), `{"ok":true}`)

	got := e.ok(t, subLoad, `{"account":"acct","backends":["b2","b1","never"]}`)
	want := fmt.Sprintf(`{"backends":[`+
		`{"backend":"b2","last_checked_ms":null,"snapshots":[],"penalty_until_ms":%d},`+
		`{"backend":"b1","last_checked_ms":%d,"snapshots":[{"key":"tpm","label":"Tokens per minute","percent":70.5,"resets_at_ms":%d,"observed_at_ms":%d}],"penalty_until_ms":null},`+
		`{"backend":"never","last_checked_ms":null,"snapshots":[],"penalty_until_ms":null}]}`, until, now, now+60000, now)
	wantJSON(t, got, want)

	// null until_ms clears; so does an absent one.
	wantJSON(t, e.ok(t, subPenalize, `{"account":"acct","backend":"b2","until_ms":null}`), `{"ok":true}`)
	wantJSON(t, e.ok(t, subLoad, `{"account":"acct","backends":["b2"]}`),
		`{"backends":[{"backend":"b2","last_checked_ms":null,"snapshots":[],"penalty_until_ms":null}]}`)
	wantJSON(t, e.ok(t, subPenalize, fmt.Sprintf(`{"account":"acct","backend":"b2","until_ms":%d}`, until)), `{"ok":true}`)
	wantJSON(t, e.ok(t, subPenalize, `{"account":"acct","backend":"b2"}`), `{"ok":true}`)
	// Accounts are separate budgets.
	wantJSON(t, e.ok(t, subLoad, `{"account":"other","backends":["b1"]}`),
		`{"backends":[{"backend":"b1","last_checked_ms":null,"snapshots":[],"penalty_until_ms":null}]}`)
	// A reading with no snapshots.
	wantJSON(t, e.ok(t, subRecord, `{"account":"acct","backend":"b3","observed_at_ms":0}`), `{"ok":true}`)

	long := strings.Repeat("b", protocol.MaxNameBytes+1)
	cases := []struct{ name, subject, body, reason string }{
		{"record missing observed_at_ms", subRecord, `{"account":"a","backend":"b"}`, "observed_at_ms is required"},
		{"record observed_at_ms negative", subRecord, `{"account":"a","backend":"b","observed_at_ms":-1}`, "observed_at_ms must be in 0.."},
		{"record missing account", subRecord, `{"backend":"b","observed_at_ms":1}`, "account must be 1..256 bytes"},
		{"record backend too long", subRecord, `{"account":"a","backend":"` + long + `","observed_at_ms":1}`, "backend must be 1..256 bytes"},
		{"record percent as string", subRecord, `{"account":"a","backend":"b","observed_at_ms":1,"snapshots":[{"key":"k","percent":"70"}]}`, "snapshots[0].percent: want number, got string"},
		{"record snapshots not an array", subRecord, `{"account":"a","backend":"b","observed_at_ms":1,"snapshots":{}}`, "snapshots: want array, got object"},
		{"record resets_at_ms out of range", subRecord, `{"account":"a","backend":"b","observed_at_ms":1,"snapshots":[{"resets_at_ms":253402300800000}]}`, "snapshots[0].resets_at_ms must be in 0.."},
		{"penalize until_ms as string", subPenalize, `{"account":"a","backend":"b","until_ms":"1"}`, "until_ms: want integer, got string"},
		{"penalize until_ms negative", subPenalize, `{"account":"a","backend":"b","until_ms":-1}`, "until_ms must be in 0.."},
		{"penalize missing backend", subPenalize, `{"account":"a","until_ms":1}`, "backend must be 1..256 bytes"},
		{"load backends empty", subLoad, `{"account":"a","backends":[]}`, "backends: must have 1..100 entries"},
		{"load backends missing", subLoad, `{"account":"a"}`, "backends: must have 1..100 entries"},
		{"load backends wrong type", subLoad, `{"account":"a","backends":"b1"}`, "backends: want array, got string"},
		{"load backend wrong type", subLoad, `{"account":"a","backends":["b1",2]}`, "backends[1]: want string, got number"},
		{"load empty backend", subLoad, `{"account":"a","backends":["b1",""]}`, "backends[1] must be 1..256 bytes"},
		{"load too many backends", subLoad, `{"account":"a","backends":[` + strings.TrimSuffix(strings.Repeat(`"b",`, 101), ",") + `]}`, "backends: must have 1..100 entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.fails(t, tc.subject, tc.body, "400", protocol.InvalidRequest.Code+": "+tc.reason)
		})
	}
}

// ---- stores on a stopped server ----

// TestStoppedServer: the stores live on a second server that is shut down;
// the service (on the first) answers 503 within the store timeout — except
// cooldown.load, which answers from node-local state by design.
func TestStoppedServer(t *testing.T) {
	store := testkit.New(t)
	names := kvstore.BucketNames(protocol.DefaultPrefix)
	cs := testkit.ClaimsKV(t, store.Bucket(t, kvstore.BucketConfig{Name: names.Claims}))
	rs := newKVReplay(t, store.Bucket(t, claims.ReplayBucketConfig(names.Replay, 10, 1)))
	cd := newCooldown(t, store.Bucket(t, cooldown.BucketConfig(protocol.DefaultPrefix, 1)))
	e := start(t, func(_ *env, c *Config) {
		c.Claims, c.Replay, c.Cooldown = cs, rs, cd
		c.StoreTimeout = 200 * time.Millisecond
		c.SettleTimeout = 200 * time.Millisecond
	})
	// Up: everything answers.
	wantJSON(t, e.ok(t, subReplay, `{"namespace":"n","key":"up","retain_until":4102444800}`), `{"result":"claimed"}`)

	store.Server.Shutdown()

	for _, c := range []struct{ subject, body string }{
		{subReplay, `{"namespace":"n","key":"down","retain_until":4102444800}`},
		{subGet, `{"tenant":"a","source":"s","key":"k"}`},
		{subSettle, `{"tenant":"a","source":"s","key":"k","hook_id":"h","revision":1}`},
		{subCRelease, `{"tenant":"a","source":"s","key":"k","hook_id":"h","revision":1}`},
		{subRecord, `{"account":"a","backend":"b","observed_at_ms":1}`},
		{subPenalize, `{"account":"a","backend":"b","until_ms":4102444800000}`},
	} {
		t0 := time.Now()
		e.fails(t, c.subject, c.body, "503", protocol.StoreUnavailable.Code)
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("%s answered after %v", c.subject, d)
		}
	}
	// Load answers from what this node wrote, even with the store down.
	wantJSON(t, e.ok(t, subLoad, `{"account":"a","backends":["b"]}`),
		`{"backends":[{"backend":"b","last_checked_ms":1,"snapshots":[],"penalty_until_ms":4102444800000}]}`)
}

// ---- lifecycle ----

func TestStopWaitsForInFlight(t *testing.T) {
	e := start(t, func(_ *env, c *Config) { c.StoreTimeout = 10 * time.Second })
	entered, gate := make(chan struct{}), make(chan struct{})
	var hitDone atomic.Bool
	e.quota.setHit(func(ctx context.Context, _ protocol.HitRequest) (protocol.HitReply, error) {
		close(entered)
		<-gate
		hitDone.Store(true)
		return protocol.HitReply{Result: protocol.ResultOK, Revision: 1}, nil
	})
	reply := e.callLater(t, "in-flight request", subHit, `{"charges":[{"kind":"hooks","tenant":"a","increment_us":1,"capacity_us":1}]}`)
	<-entered
	type result struct {
		err     error
		hitDone bool // whether the in-flight request had finished when Stop returned
	}
	stopped := make(chan result, 1)
	go func() {
		err := e.svc.Stop()
		stopped <- result{err, hitDone.Load()}
	}()
	// Stop has begun once the service stops taking requests; only then is
	// the in-flight one let go, so a Stop that did not wait for it has
	// returned (or returns) with it unfinished.
	testkit.Eventually(t, 10*time.Second, func() bool {
		m, err := e.client.Request(subHit, []byte(`{}`), time.Second)
		return errors.Is(err, nats.ErrNoResponders) || (err == nil && strings.HasPrefix(m.Header.Get(micro.ErrorHeader), protocol.ServiceStopping.Code))
	}, "the stopping service refuses new requests")
	close(gate)
	r := <-stopped
	if r.err != nil {
		t.Fatalf("Stop: %v", r.err)
	}
	if !r.hitDone {
		t.Fatal("Stop returned with a request in flight")
	}
	if m := <-reply; m != nil {
		wantJSON(t, okBody(t, m), `{"result":"ok","hook_id":"","retry_after_ms":0,"revision":1}`)
	}
	// After Stop nobody answers (or a late delivery is told the service stops).
	m, err := e.client.Request(subHit, []byte(`{}`), time.Second)
	if err == nil {
		failsWith(t, m, "503", protocol.ServiceStopping.Code)
	} else if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("after Stop: %v", err)
	}
	if err := e.svc.Stop(); err != nil { // idempotent
		t.Fatalf("second Stop: %v", err)
	}
}

func TestBusy(t *testing.T) {
	e := start(t, func(_ *env, c *Config) {
		c.MaxInFlight = 1
		c.StoreTimeout = 200 * time.Millisecond
	})
	entered, gate := make(chan struct{}), make(chan struct{})
	e.quota.setHit(func(ctx context.Context, _ protocol.HitRequest) (protocol.HitReply, error) {
		close(entered)
		<-gate
		return protocol.HitReply{Result: protocol.ResultOK}, nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.client.Request(subHit, []byte(`{"charges":[{"kind":"hooks","tenant":"a","increment_us":1,"capacity_us":1}]}`), 5*time.Second)
	}()
	<-entered
	// The one slot is taken: a request waits for it until its deadline.
	e.fails(t, subReplay, `{"namespace":"n","key":"k","retain_until":1}`, "503", protocol.StoreUnavailable.Code)
	close(gate)
	<-done
	wantJSON(t, e.ok(t, subReplay, `{"namespace":"n","key":"k","retain_until":1}`), `{"result":"claimed"}`)
}

// ---- metrics ----

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := start(t, func(_ *env, c *Config) { c.Registerer = reg })
	e.ok(t, subReplay, `{"namespace":"n","key":"k","retain_until":4102444800}`)
	e.ok(t, subReplay, `{"namespace":"n","key":"k","retain_until":4102444800}`)
	e.fails(t, subReplay, `{}`, "400", protocol.InvalidRequest.Code)
	e.quota.setErr(protocol.ErrUnavailable)
	e.fails(t, subCount, `{"principal":"p","key":"k"}`, "503", protocol.StoreUnavailable.Code)

	// A second service on the same registry shares the collectors.
	svc2, err := New(e.kit.Conn, Config{Prefix: "other", Replay: e.replay, Registerer: reg})
	if err != nil {
		t.Fatalf("second service on one registry: %v", err)
	}
	defer svc2.Stop()

	testkit.Eventually(t, 2*time.Second, func() bool {
		c := testkit.MetricSeries(t, reg, "sluice_service_requests_total")
		return c[subReplay+"/ok"] == 2 && c[subReplay+"/invalid"] == 1 && c[subCount+"/unavailable"] == 1
	}, "request counters by endpoint and outcome")
}

// TestOversizedRequest: a request over MaxRequestBytes is a 400 from the
// service, whatever the endpoint, before decoding.
func TestOversizedRequest(t *testing.T) {
	e := start(t, nil)
	body := `[` + strings.Repeat(`{},`, (900<<10)/3) + `{}]`
	e.fails(t, "sluice.v1.quota.hit", body, "400", "invalid_request: request larger than 65536 bytes")
	e.fails(t, "sluice.v1.claims.get", body, "400", "invalid_request: request larger than 65536 bytes")
}

// TestTenantScopedSubjects: on <prefix>.v1.t.<tenant>.<endpoint> a body
// acting for that tenant is served as on the unscoped subject; one naming
// another tenant (anywhere in it) is refused; quota.reset has no scoped
// subject.
func TestTenantScopedSubjects(t *testing.T) {
	e := start(t, nil)
	hit := `{"charges":[{"kind":"hooks","tenant":"%s","increment_us":1000,"capacity_us":10000}]%s}`
	ok := e.ok(t, "sluice.v1.t.acme.quota.hit", fmt.Sprintf(hit, "acme", ""))
	if ok["result"] != "ok" {
		t.Fatalf("scoped hit: %v", ok)
	}
	for subject, body := range map[string]string{
		"sluice.v1.t.acme.quota.hit":     fmt.Sprintf(hit, "globex", ""),
		"sluice.v1.t.acme.quota.hit ":    fmt.Sprintf(hit, "acme", `,"claim":{"tenant":"globex","source":"s","key":"k","hook_id":"h"}`),
		"sluice.v1.t.acme.claims.settle": `{"tenant":"globex","source":"s","key":"k","hook_id":"h","revision":1}`,
		"sluice.v1.t.acme.claims.get":    `{"tenant":"globex","source":"s","key":"k"}`,
		"sluice.v1.t.acme.quota.reserve": `{"principal":"globex","key":"k","max":1}`,
		"sluice.v1.t.acme.replay.claim":  `{"namespace":"globex/gh","key":"k","retain_until":1}`,
		"sluice.v1.t.acme.cooldown.load": `{"account":"globex","backends":["b"]}`,
	} {
		e.fails(t, strings.TrimSpace(subject), body, "400", "invalid_request: tenant \"globex\" does not match the subject's tenant")
	}
	// Own tenant through the scoped subjects.
	e.ok(t, "sluice.v1.t.acme.claims.get", `{"tenant":"acme","source":"s","key":"k"}`)
	e.ok(t, "sluice.v1.t.acme.replay.claim", `{"namespace":"acme/gh","key":"k","retain_until":1}`)
	if _, err := e.client.Request("sluice.v1.t.acme.quota.reset", []byte(`{"tenant":"acme"}`), time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("scoped reset: want no responders, got %v", err)
	}
}

// countingClaims counts the settles a claims.Store is asked for: one
// write (SettleOwn, StartSettleOwn) or the holder's read first (Settle).
type countingClaims struct {
	claims.Store
	own, read atomic.Int64
}

func (c *countingClaims) Settle(ctx context.Context, id claims.ID, hookID string, rev uint64, ttl time.Duration) error {
	c.read.Add(1)
	return c.Store.Settle(ctx, id, hookID, rev, ttl)
}

func (c *countingClaims) SettleOwn(ctx context.Context, id claims.ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	c.own.Add(1)
	return c.Store.SettleOwn(ctx, id, hookID, digest, rev, ttl)
}

func (c *countingClaims) StartSettleOwn(id claims.ID, hookID string, rev uint64, ttl time.Duration) (claims.StartedSettle, error) {
	c.own.Add(1)
	return c.Store.StartSettleOwn(id, hookID, rev, ttl)
}

// TestClaimsSettleIsTheOwners: claims.settle reaches the partition owner
// that took the claim. A settle of the claim a quota.hit granted is one
// write; one presenting the holder's revision with another hook id is
// checked against the holder (a read) and refused, and so is a second
// settle of the same claim.
func TestClaimsSettleIsTheOwners(t *testing.T) {
	var counted *countingClaims
	e := start(t, func(e *env, c *Config) {
		counted = &countingClaims{Store: e.claims}
		w, qc := ownerkit.Serving(t, e.kit, counted, testPartitions, owner.WithLeaseTTL(2*time.Second))
		e.worker = w
		c.Quota, c.Partitions = qc, testPartitions
	})
	hit := func(key, hook string) uint64 {
		got := e.ok(t, subHit, `{"charges":[`+hooksCharge("acme", 100)+`],"claim":{"tenant":"acme","source":"gh","key":"`+key+`","hook_id":"`+hook+`"}}`)
		if got["result"] != "ok" {
			t.Fatalf("hit %s: %v", key, got)
		}
		return uint64(num(t, got, "revision"))
	}
	settle := func(key, hook string, rev uint64) string {
		return fmt.Sprintf(`{"tenant":"acme","source":"gh","key":%q,"hook_id":%q,"revision":%d}`, key, hook, rev)
	}

	rev := hit("k-1", "h1")
	e.fails(t, subSettle, settle("k-1", "h2", rev), "409", protocol.ClaimLost.Code)
	if own, read := counted.own.Load(), counted.read.Load(); own != 0 || read != 1 {
		t.Fatalf("another hook id's settle: %d one-write settles, %d read first; want 0 and 1", own, read)
	}
	wantJSON(t, e.ok(t, subSettle, settle("k-1", "h1", rev)), `{"ok":true}`)
	if own, read := counted.own.Load(), counted.read.Load(); own != 1 || read != 1 {
		// Another hook id's settle does not use the holder's grant up.
		t.Fatalf("the holder's settle: %d one-write settles, %d read first; want 1 and 1", own, read)
	}

	rev = hit("k-2", "h1")
	wantJSON(t, e.ok(t, subSettle, settle("k-2", "h1", rev)), `{"ok":true}`)
	if own, read := counted.own.Load(), counted.read.Load(); own != 2 || read != 1 {
		t.Fatalf("a granted claim's settle: %d one-write settles, %d read first; want 2 and 1", own, read)
	}
	if st := e.ok(t, subGet, `{"tenant":"acme","source":"gh","key":"k-2"}`); st["state"] != "committed" || st["hook_id"] != "h1" {
		t.Fatalf("after the settle: %v", st)
	}
	e.fails(t, subSettle, settle("k-2", "h1", rev), "409", protocol.ClaimLost.Code) // settled already
}
