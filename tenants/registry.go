package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/webhook"
)

// BucketConfig is the tenants bucket of prefix: one record per tenant,
// keyed by the tenant's token (protocol.EncodeToken).
func BucketConfig(prefix string, replicas int) kvstore.BucketConfig {
	return kvstore.BucketConfig{
		Name:         kvstore.BucketNames(prefix).Tenants,
		Description:  "sluice tenant and source records (secrets sealed)",
		Replicas:     replicas,
		MaxValueSize: MaxRecordBytes,
	}
}

// Registry follows the tenants bucket and keeps an immutable snapshot of
// the resolved records, swapped atomically on every change. It also writes
// records (revision-checked).
type Registry struct {
	b    *kvstore.Bucket
	keys atomic.Pointer[Keyring]
	// wmu serialises the writers of snap: the follower and ReloadKeys.
	wmu sync.Mutex
	log *slog.Logger

	snap     atomic.Pointer[snapshot]
	building *snapshot // the initial snapshot, owned by the follower until loaded
	f        *kvstore.Follower
}

// snapshot is the resolved state of every record at one bucket revision.
// It is never modified once published.
type snapshot struct {
	tenants map[string]*resolved
	names   []string // sorted
	rev     uint64   // last applied bucket revision
	// unavailable counts the sources that cannot verify on this node.
	unavailable int
	// closed: a tenant record exists or has existed (ClosedKey, or a
	// record or its tombstone seen). Never reset in a running process.
	closed bool
	// marker: ClosedKey itself has been applied.
	marker bool
}

// ClosedKey is the tenants bucket's marker that a tenant record has
// existed in this fleet: from then on, unknown tenants are refused even
// when no record is left (see Policy). It contains '.', which no encoded
// tenant name does, so it is never taken for a tenant.
const ClosedKey = "sluice.admission.closed"

// resolved is one tenant's record, ready for requests.
type resolved struct {
	rec         *Tenant
	verified    bool // one of its sources verifies
	sources     map[string]*resolvedSource
	unavailable int // sources that cannot verify on this node
}

// resolvedSource is a source ready for requests. The secrets are opened
// into verifiers once, when the record changes.
type resolvedSource struct {
	dedupe   *webhook.Dedupe // nil: the default
	verifier webhook.Verifier
	maxBody  int64 // 0: the default
	limits   *Limits
	event    webhook.EventType
	access   config.Access
	shake    string
	// unavailable is why the source cannot verify on this node (a secret
	// that does not open): its hooks get 503 (fail closed).
	unavailable error
}

// NewRegistry returns a registry on bucket b. Options: WithKeys,
// WithLogger. Start it to follow the bucket.
func NewRegistry(b *kvstore.Bucket, opts ...RegistryOption) *Registry {
	r := &Registry{b: b, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o != nil {
			o.applyRegistry(r)
		}
	}
	r.snap.Store(&snapshot{tenants: map[string]*resolved{}})
	return r
}

// Keys is the registry's keyring (nil: none).
func (r *Registry) Keys() *Keyring { return r.keys.Load() }

// ReloadKeys replaces the keyring (SIGHUP re-reads --secrets-key-file) and
// opens every record's secrets again with it, in one new snapshot.
func (r *Registry) ReloadKeys(k *Keyring) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.keys.Store(k)
	old := r.snap.Load()
	next := &snapshot{tenants: make(map[string]*resolved, len(old.tenants)), names: old.names, rev: old.rev, closed: old.closed, marker: old.marker}
	for n, t := range old.tenants {
		next.tenants[n] = r.resolve(t.rec)
		next.unavailable += r.logUnavailable(next.tenants[n])
	}
	r.snap.Store(next)
	r.log.Info("secrets keys replaced", "secrets_key", k.Current(), "tenants", len(next.tenants))
}

// Start loads every record and follows changes until Stop. It returns once
// the initial records are applied (or ctx ends).
func (r *Registry) Start(ctx context.Context) error {
	r.building = &snapshot{tenants: map[string]*resolved{}}
	f, err := kvstore.Follow(ctx, r.b.KV(), func(e jetstream.KeyValueEntry, initial bool) {
		if initial {
			r.load(e)
		} else {
			r.apply(e)
		}
	}, r.loaded)
	if err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	r.f = f
	s := r.snap.Load()
	n := 0
	for _, t := range s.tenants {
		n += r.logUnavailable(t)
	}
	r.log.Info("tenant records loaded", "tenants", len(s.tenants), "unavailable_sources", n, "secrets_key", r.Keys().Current(), "admission_closed", s.closed)
	if s.closed {
		// Records written before the marker existed (or a crash between a
		// record and its marker): make the marker durable now.
		if err := r.markClosed(ctx); err != nil {
			r.log.Warn("tenants: cannot write the admission marker (records still close admission while they exist)", "error", err)
		}
	}
	return nil
}

// Closed reports whether a tenant record exists or has ever existed in
// the bucket: the quickstart's open admission has ended for good.
func (r *Registry) Closed() bool { return r.snap.Load().closed }

// markClosed makes Closed durable: it writes ClosedKey unless this node
// has applied it already, and waits until it has.
func (r *Registry) markClosed(ctx context.Context) error {
	if s := r.snap.Load(); s.marker {
		return nil
	}
	data, err := json.Marshal(map[string]any{"closed_at": time.Now().UTC()})
	if err != nil {
		return err
	}
	rev, err := r.b.Put(ctx, ClosedKey, data, 0)
	if err != nil {
		return fmt.Errorf("tenants: admission marker: %w", err)
	}
	r.waitApplied(ctx, rev)
	return nil
}

// decodeEntry resolves one bucket entry: the tenant and its record (nil
// for a delete, a purge or a malformed record: fail closed, no tenant).
func (r *Registry) decodeEntry(e jetstream.KeyValueEntry) (string, *resolved, bool) {
	name, err := protocol.DecodeToken(e.Key())
	if err != nil {
		return "", nil, false
	}
	if e.Operation() != jetstream.KeyValuePut {
		return name, nil, true
	}
	var t Tenant
	if err := json.Unmarshal(e.Value(), &t); err != nil || t.Name != name || t.Validate() != nil {
		r.log.Error("ignoring malformed tenant record", "tenant", name, "revision", e.Revision())
		return name, nil, true
	}
	t.Revision = e.Revision()
	return name, r.resolve(&t), true
}

// load applies an initial entry to the snapshot under construction
// (published once, by loaded: no copy per record at start).
func (r *Registry) load(e jetstream.KeyValueEntry) {
	r.building.rev = max(r.building.rev, e.Revision())
	if e.Key() == ClosedKey {
		r.building.closed, r.building.marker = true, e.Operation() == jetstream.KeyValuePut
		return
	}
	name, res, ok := r.decodeEntry(e)
	if !ok {
		return
	}
	r.building.closed = true
	if res != nil {
		r.building.tenants[name] = res
	} else {
		delete(r.building.tenants, name)
	}
}

// loaded publishes the initial snapshot.
func (r *Registry) loaded() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	b := r.building
	r.building = nil
	b.names = slices.Sorted(maps.Keys(b.tenants))
	for _, t := range b.tenants {
		b.unavailable += t.unavailable
	}
	r.snap.Store(b)
}

// apply publishes a new snapshot with one record changed; the others are
// shared with the previous one.
func (r *Registry) apply(e jetstream.KeyValueEntry) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	old := r.snap.Load()
	if e.Key() == ClosedKey {
		next := *old
		next.rev = max(old.rev, e.Revision())
		next.closed, next.marker = true, e.Operation() == jetstream.KeyValuePut
		r.snap.Store(&next)
		if !next.marker {
			r.log.Warn("tenants: the admission marker was deleted; this node stays closed to unknown tenants until it restarts", "key", ClosedKey)
		}
		return
	}
	name, res, ok := r.decodeEntry(e)
	if !ok {
		return
	}
	next := &snapshot{tenants: make(map[string]*resolved, len(old.tenants)+1), rev: max(old.rev, e.Revision()), unavailable: old.unavailable, closed: true, marker: old.marker}
	for n, t := range old.tenants {
		next.tenants[n] = t
	}
	if prev := old.tenants[name]; prev != nil {
		next.unavailable -= prev.unavailable
	}
	if res != nil {
		next.unavailable += res.unavailable
	}
	i, had := slices.BinarySearch(old.names, name)
	switch {
	case res != nil && !had:
		next.names = slices.Insert(slices.Clone(old.names), i, name)
	case res == nil && had:
		next.names = slices.Delete(slices.Clone(old.names), i, i+1)
	default:
		next.names = old.names
	}
	if res != nil {
		next.tenants[name] = res
	} else {
		delete(next.tenants, name)
	}
	r.snap.Store(next)
	op := "removed"
	if res != nil {
		op = "applied"
		r.logUnavailable(res)
	}
	r.log.Info("tenant record "+op, "tenant", name, "revision", e.Revision())
	if len(next.tenants) == 0 {
		r.log.Warn("no tenant records left: admission stays closed, unknown tenants get 404 unknown_source (unless the --config file says allow_unknown: true)")
	}
}

// logUnavailable logs each source of t that cannot verify on this node and
// returns how many there are.
func (r *Registry) logUnavailable(t *resolved) int {
	n := 0
	for _, sn := range slices.Sorted(maps.Keys(t.sources)) {
		if err := t.sources[sn].unavailable; err != nil {
			n++
			r.log.Error("source cannot verify on this node: its hooks get 503", "tenant", t.rec.Name, "source", sn, "error", err)
		}
	}
	return n
}

// resolve opens a record's secrets and parses its specs.
func (r *Registry) resolve(t *Tenant) *resolved {
	res := &resolved{rec: t, sources: make(map[string]*resolvedSource, len(t.Sources))}
	for sn, s := range t.Sources {
		rs := &resolvedSource{maxBody: s.MaxBodyBytes, limits: s.Limits, shake: s.Handshake}
		if e, err := webhook.ParseEventType(s.EventType); err != nil {
			rs.unavailable = err
		} else {
			rs.event = e
		}
		if a, err := config.ParseAccess(s.Methods, s.ContentTypes, s.IPAllow); err != nil {
			rs.unavailable = err // fail closed: never accept from any address
		} else {
			rs.access = a
		}
		if s.Dedupe != "" {
			d, err := webhook.ParseDedupe(s.Dedupe)
			if err != nil {
				rs.unavailable = err
			}
			rs.dedupe = &d
		}
		if s.Verify != nil {
			res.verified = true
			v, err := r.verifier(t.Name, sn, s)
			rs.verifier = v
			if rs.unavailable == nil {
				rs.unavailable = err
			}
		}
		if rs.unavailable != nil {
			res.unavailable++
		}
		res.sources[sn] = rs
	}
	return res
}

// verifier builds a source's verifier over its secrets.
func (r *Registry) verifier(tenant, source string, s *Source) (webhook.Verifier, error) {
	sc, err := s.Verify.scheme("sources." + source + ".verify")
	if err != nil {
		return nil, err
	}
	mv := &multiVerifier{scheme: s.Verify.Scheme}
	for _, sec := range s.Secrets {
		plain, err := r.Keys().Open(tenant, source, sec.ID, sec.Sealed)
		if err != nil {
			return nil, err
		}
		v, err := webhook.NewSchemeVerifier(sc, plain)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", sec.ID, err)
		}
		mv.secrets = append(mv.secrets, liveVerifier{v: v, notAfter: sec.NotAfter})
	}
	return mv, nil
}

// multiVerifier verifies with any of a source's secrets that is live at
// the request's time: during a rotation both the old and the new one.
type multiVerifier struct {
	scheme  string
	secrets []liveVerifier
}

type liveVerifier struct {
	v        webhook.Verifier
	notAfter *time.Time
}

var errNoLiveSecret = fmt.Errorf("%w: no live secret", webhook.ErrVerification)

func (m *multiVerifier) Name() string { return m.scheme }

// CRCResponse answers a CRC with the newest secret (the last added).
func (m *multiVerifier) CRCResponse(token string) (string, bool) {
	if len(m.secrets) == 0 {
		return "", false
	}
	c, ok := m.secrets[len(m.secrets)-1].v.(interface{ CRCResponse(string) (string, bool) })
	if !ok {
		return "", false
	}
	return c.CRCResponse(token)
}
func (m *multiVerifier) String() string {
	return "tenants.multiVerifier{" + m.scheme + ", secrets:[redacted]}"
}

func (m *multiVerifier) Verify(h http.Header, body []byte, now time.Time) (webhook.Verified, error) {
	err := errNoLiveSecret
	for _, s := range m.secrets {
		if s.notAfter != nil && !now.Before(*s.notAfter) {
			continue
		}
		v, verr := s.v.Verify(h, body, now)
		if verr == nil {
			return v, nil
		}
		err = verr
	}
	return webhook.Verified{}, err
}

// Stop ends the watcher and waits for it.
func (r *Registry) Stop() {
	if r.f != nil {
		r.f.Stop()
	}
}

// Register adds the registry's gauges to reg: records, the last applied
// bucket revision (equal on every node that has caught up) and the
// sources that cannot verify on this node.
func (r *Registry) Register(reg prometheus.Registerer) error {
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_records", Help: "Tenant records applied on this node."},
			func() float64 { return float64(len(r.snap.Load().tenants)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_revision", Help: "Last tenants-bucket revision applied on this node (the same on every node that has caught up)."},
			func() float64 { return float64(r.snap.Load().rev) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_unavailable_sources", Help: "Sources whose secret does not open on this node (their hooks get 503)."},
			func() float64 { return float64(r.snap.Load().unavailable) }),
	} {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// count is the number of records.
func (r *Registry) count() int { return len(r.snap.Load().tenants) }

// names are the records' tenants, in order.
func (r *Registry) names() []string { return r.snap.Load().names }

// sealedWithOther reports whether one of the record's secrets is sealed
// with another key than kid.
func (t *resolved) sealedWithOther(kid string) bool {
	if t == nil {
		return false
	}
	for _, s := range t.rec.Sources {
		for _, sec := range s.Secrets {
			if sec.Sealed != nil && sec.Sealed.KeyID != kid {
				return true
			}
		}
	}
	return false
}

// lookup returns tenant's resolved record in the current snapshot.
func (r *Registry) lookup(tenant string) *resolved { return r.snap.Load().tenants[tenant] }

// page returns up to limit tenant names after after, in order, and
// whether more follow.
func (r *Registry) page(after string, limit int) ([]*Tenant, bool) {
	s := r.snap.Load()
	i := sort.SearchStrings(s.names, after)
	if i < len(s.names) && s.names[i] == after {
		i++
	}
	var out []*Tenant
	for ; i < len(s.names) && len(out) < limit; i++ {
		out = append(out, s.tenants[s.names[i]].rec)
	}
	return out, i < len(s.names)
}

// waitApplied waits (bounded by ctx) until the snapshot includes bucket
// revision rev, so a node answers its own writes at once.
func (r *Registry) waitApplied(ctx context.Context, rev uint64) {
	for r.snap.Load().rev < rev {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// ErrConflict is a revision-checked write that lost: the record changed.
var ErrConflict = errors.New("tenants: revision conflict")

// ErrNotFound: no record for the tenant.
var ErrNotFound = errors.New("tenants: not found")

// get reads tenant's record from the bucket (leader read: the revision
// must be the newest for a revision-checked write).
func (r *Registry) get(ctx context.Context, tenant string) (*Tenant, error) {
	rec, err := r.b.GetLeader(ctx, protocol.EncodeToken(tenant))
	if err != nil {
		if errors.Is(err, kvstore.ErrNotFound) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	var t Tenant
	if err := json.Unmarshal(rec.Value, &t); err != nil {
		return nil, fmt.Errorf("tenants: record of %s: %w", tenant, err)
	}
	t.Revision = rec.Revision
	return &t, nil
}

// put stores t: created when rev is 0 (ErrConflict if it exists), else
// only over revision rev (ErrConflict otherwise). It returns the new
// revision.
func (r *Registry) put(ctx context.Context, t *Tenant, rev uint64) (uint64, error) {
	if err := t.Validate(); err != nil {
		return 0, err
	}
	stored := *t
	stored.Revision = 0
	data, err := json.Marshal(&stored)
	if err != nil {
		return 0, err
	}
	if len(data) > MaxRecordBytes {
		return 0, fieldErr("sources", "record of %d bytes exceeds %d", len(data), MaxRecordBytes)
	}
	key := protocol.EncodeToken(t.Name)
	var newRev uint64
	if rev == 0 {
		newRev, _, err = r.b.Create(ctx, key, data, 0)
		if errors.Is(err, kvstore.ErrExists) {
			return 0, ErrConflict
		}
	} else {
		newRev, err = r.b.Update(ctx, key, data, rev, 0)
		if errors.Is(err, kvstore.ErrWrongLastSequence) {
			return 0, ErrConflict
		}
	}
	if err != nil {
		return 0, err
	}
	r.waitApplied(ctx, newRev)
	if rev == 0 {
		// The record closes admission while it exists; the marker keeps
		// it closed after it is removed. Removing writes it first too, so
		// a failure here cannot reopen the node.
		if err := r.markClosed(ctx); err != nil {
			r.log.Warn("tenants: cannot write the admission marker yet", "error", err)
		}
	}
	return newRev, nil
}

// remove deletes tenant's record (only revision rev when rev > 0).
func (r *Registry) remove(ctx context.Context, tenant string, rev uint64) error {
	if _, err := r.get(ctx, tenant); err != nil {
		return err
	}
	// Removing a record never reopens admission: the marker is durable
	// before the record goes.
	if err := r.markClosed(ctx); err != nil {
		return err
	}
	err := r.b.Purge(ctx, protocol.EncodeToken(tenant), rev)
	if errors.Is(err, kvstore.ErrWrongLastSequence) {
		return ErrConflict
	}
	if err != nil {
		return err
	}
	// The purge marker's revision is not returned: wait for the tenant to
	// leave this node's snapshot.
	for r.lookup(tenant) != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// limitsOf completes partial limits over base.
func limitsOf(l *Limits, base config.Limits) config.Limits { return l.complete(base) }
