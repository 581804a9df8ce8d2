package kvstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BucketConfig describes a KV bucket as sluice uses it: History 1 (a longer
// history clamps short TTLs), per-key TTLs and expiry markers enabled. It
// is a server resource's whole configuration, as nats.go's
// jetstream.KeyValueConfig is (docs/DESIGN.md "Options"): a zero field
// keeps its default, a negative one is refused (Validate).
type BucketConfig struct {
	// Name of the bucket (KV naming rules: [-_a-zA-Z0-9]+).
	Name        string
	Description string
	// Replicas of the backing stream (1 embedded, 3 in a cluster). Default 1.
	Replicas int
	// Storage: file (the default) or memory.
	Storage jetstream.StorageType
	// LimitMarkerTTL is how long expiry and purge markers live. Default 1 s,
	// the minimum the server accepts. Markers let watchers see TTL expiry.
	LimitMarkerTTL time.Duration
	// MaxMsgs caps the number of messages (keys plus live markers) in the
	// bucket; a create beyond it is rejected (DiscardNew, code 10077).
	// 0: unlimited.
	MaxMsgs int64
	// MaxValueSize caps a value in bytes (0: unlimited).
	MaxValueSize int32
	// NoMarkers keeps per-key TTLs but turns expiry markers off (an expired
	// key vanishes at once, unseen by watchers): for a bucket with MaxMsgs
	// that must keep expiring keys while full, since a replicated stream
	// refuses an expiry marker at capacity (DiscardNew) and the key stays
	// forever (nats-server v2.15, R3).
	NoMarkers bool
	// AsyncPersist sets the stream's async persist mode (nats-server 2.12+,
	// R1 file storage only): a write is acked before it reaches the file, so
	// a hard kill of the server can lose acked writes. Fixed at creation:
	// EnsureBucket refuses an existing bucket whose mode differs.
	AsyncPersist bool
	// Placement places the bucket's stream when it is created (nil: where
	// the server chooses); an existing bucket keeps its placement.
	Placement *jetstream.Placement
}

// ErrInvalidConfig is wrapped by the error of Validate, and so of
// EnsureBucket and OpenBucket, for an unusable BucketConfig.
var ErrInvalidConfig = errors.New("kvstore: invalid bucket config")

// Validate refuses a configuration with no name or a negative Replicas,
// LimitMarkerTTL, MaxMsgs or MaxValueSize; zero keeps the default.
func (c BucketConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: bucket %q: %s", ErrInvalidConfig, c.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Name == "":
		return bad("no name")
	case c.Replicas < 0:
		return bad("replicas must be >= 0, got %d", c.Replicas)
	case c.LimitMarkerTTL < 0:
		return bad("limit marker TTL must be >= 0, got %v", c.LimitMarkerTTL)
	case c.MaxMsgs < 0:
		return bad("max msgs must be >= 0, got %d", c.MaxMsgs)
	case c.MaxValueSize < 0:
		return bad("max value size must be >= 0, got %d", c.MaxValueSize)
	}
	return nil
}

// ErrPersistMode is returned by EnsureBucket for an existing bucket whose
// persist mode differs from the configuration's (the server cannot change
// it).
var ErrPersistMode = errors.New("kvstore: the bucket's persist mode differs and cannot be changed")

// StreamName is the name of the JetStream stream behind a KV bucket.
func StreamName(bucket string) string { return "KV_" + bucket }

// SubjectPrefix is the subject prefix of a KV bucket's keys ("$KV.<bucket>.").
func SubjectPrefix(bucket string) string { return "$KV." + bucket + "." }

// EnsureBucket creates the bucket, or updates it to cfg when it exists.
// It is idempotent: every node of a fleet calls it at start. Errors:
// ErrInvalidConfig (Validate), ErrPersistMode, the server's.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.LimitMarkerTTL == 0 {
		cfg.LimitMarkerTTL = time.Second
	}
	want := cfg.MaxMsgs
	if want == 0 {
		want = -1
	}
	persist := jetstream.DefaultPersistMode
	if cfg.AsyncPersist {
		persist = jetstream.AsyncPersistMode
	}
	// fix applies what KeyValueConfig cannot express (MaxMsgs, DiscardNew,
	// no markers) and reports whether sc changed.
	fix := func(sc *jetstream.StreamConfig) bool {
		markerTTL := RoundTTL(cfg.LimitMarkerTTL)
		if cfg.NoMarkers {
			markerTTL = 0 // per-message TTLs stay allowed (AllowMsgTTL)
		}
		changed := sc.MaxMsgs != want || sc.Discard != jetstream.DiscardNew ||
			sc.SubjectDeleteMarkerTTL != markerTTL || !sc.AllowMsgTTL ||
			sc.Replicas != cfg.Replicas || sc.MaxMsgsPerSubject != 1 ||
			(cfg.MaxValueSize > 0 && sc.MaxMsgSize != cfg.MaxValueSize)
		sc.MaxMsgs, sc.Discard, sc.SubjectDeleteMarkerTTL, sc.AllowMsgTTL = want, jetstream.DiscardNew, markerTTL, true
		sc.Replicas, sc.MaxMsgsPerSubject = cfg.Replicas, 1
		if cfg.MaxValueSize > 0 {
			sc.MaxMsgSize = cfg.MaxValueSize
		}
		return changed
	}
	var kv jetstream.KeyValue
	ensureOnce := func(ctx context.Context) error {
		// An existing bucket is updated in one stream update: going through
		// CreateOrUpdateKeyValue would reset MaxMsgs for a moment, leaving
		// a window in which a capacity (the replay store's) is not enforced.
		st, err := readStream(ctx, js, StreamName(cfg.Name))
		switch {
		case err == nil:
			sc := st.CachedInfo().Config
			if sc.PersistMode != persist {
				return fmt.Errorf("%w: the stream %s has persist mode %s, the configuration asks for %s",
					ErrPersistMode, StreamName(cfg.Name), persistName(sc.PersistMode), persistName(persist))
			}
			if fix(&sc) {
				if _, err := js.UpdateStream(ctx, sc); err != nil {
					return err
				}
			}
			kv, err = js.KeyValue(ctx, cfg.Name)
			return err
		case errors.Is(err, jetstream.ErrStreamNotFound):
			// Created as a KV stream (what CreateKeyValue would make) with
			// every setting in place at once, the persist mode included
			// (KeyValueConfig cannot say it, and an update cannot change it).
			sc := newStreamConfig(cfg)
			fix(&sc)
			sc.PersistMode, sc.Placement = persist, cfg.Placement
			var created jetstream.Stream
			err := CreateRaced(ctx, func(ctx context.Context) (err error) {
				created, err = js.CreateStream(ctx, sc)
				return err
			}, findStream(js, sc.Name))
			if err != nil {
				if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
					return errRetryNow // another node created it meanwhile
				}
				return err
			}
			if got := created.CachedInfo().Config.PersistMode; got != persist {
				// A server before 2.12 ignores the field.
				return fmt.Errorf("%w: the server created %s with persist mode %s (async persist needs nats-server 2.12 or later)",
					ErrPersistMode, StreamName(cfg.Name), persistName(got))
			}
			kv, err = js.KeyValue(ctx, cfg.Name)
			return err
		default:
			return err
		}
	}
	err := Retry(ctx, func(ctx context.Context) error {
		err := ensureOnce(ctx)
		var apiErr *jetstream.APIError
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
			(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamNotFound) {
			// In a cluster a stream another node just created may not be
			// visible here yet (or vice versa): look again.
			return errRetryNow
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s: %w", cfg.Name, err)
	}
	return kv, nil
}

// newStreamConfig is the stream jetstream.CreateKeyValue makes for a
// bucket with History 1 and a LimitMarkerTTL (nats.go v1.55
// prepareKeyValueConfig); EnsureBucket's fix then applies the rest.
func newStreamConfig(cfg BucketConfig) jetstream.StreamConfig {
	maxMsgSize := cfg.MaxValueSize
	if maxMsgSize == 0 {
		maxMsgSize = -1
	}
	return jetstream.StreamConfig{
		Name:                   StreamName(cfg.Name),
		Description:            cfg.Description,
		Subjects:               []string{SubjectPrefix(cfg.Name) + ">"},
		MaxMsgsPerSubject:      1,
		MaxBytes:               -1,
		MaxMsgSize:             maxMsgSize,
		Storage:                cfg.Storage,
		Replicas:               cfg.Replicas,
		AllowRollup:            true,
		DenyDelete:             true,
		Duplicates:             2 * time.Minute,
		MaxMsgs:                -1,
		MaxConsumers:           -1,
		AllowDirect:            true,
		Discard:                jetstream.DiscardNew,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: RoundTTL(cfg.LimitMarkerTTL),
	}
}

func persistName(m jetstream.PersistModeType) string {
	if m == jetstream.AsyncPersistMode {
		return "async"
	}
	return "default (sync)"
}

// errRetryNow makes Retry try again (a lost creation race).
var errRetryNow = errors.New("kvstore: retry")

// ErrNoJetStream is WaitReady's answer for a server without JetStream.
var ErrNoJetStream = errors.New("JetStream not enabled")

// noJetStreamFor is how long the JetStream API may have no responders
// before WaitReady gives up: a server with JetStream subscribes to its API
// before it accepts clients, so this is a margin, not a wait for a leader.
const noJetStreamFor = time.Second

// WaitReady polls until the JetStream API answers (useful right after a
// cluster forms, before a meta leader exists) or ctx ends. A server
// without JetStream (no responders for a second, or JetStream off for the
// account) is ErrNoJetStream at once, not a wait for ctx.
func WaitReady(ctx context.Context, js jetstream.JetStream) error {
	var last error
	var none time.Time // since when the API has had no responders
	// Each attempt is bounded, from a quarter second up to 2 s: before a
	// cluster's meta leader is known, nats-server answers no account info
	// request (jetstream_api.go jsAccountInfoRequest), and one sent then
	// is asked again rather than waited out.
	attempt := 250 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		_, err := js.AccountInfo(actx)
		cancel()
		attempt = min(2*attempt, 2*time.Second)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return fmt.Errorf("%w for this account: %w", ErrNoJetStream, err)
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders):
			if none.IsZero() {
				none = time.Now()
			} else if time.Since(none) >= noJetStreamFor {
				return fmt.Errorf("%w: no server answers the JetStream API: %w", ErrNoJetStream, err)
			}
		default:
			none = time.Time{}
		}
		last = err
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Retry calls op until it succeeds, fails with an error retrying cannot
// fix, or ctx ends, each attempt at most 5 s: for start-up calls against a
// cluster still electing leaders.
func Retry(ctx context.Context, op func(context.Context) error) error {
	wait := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(actx)
		cancel()
		if err == nil || (!retryable(err) && !errors.Is(err, errRetryNow)) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func retryable(err error) bool {
	if errors.Is(MapError(err), errUnavailable) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 10008: cluster not ready / no leader; 10023: insufficient
		// resources; 10074/10075: peers not current; 10005: no suitable
		// peers (a fresh cluster whose peers are not all known yet); 503s
		// in general.
		switch apiErr.ErrorCode {
		case 10005, 10008, 10023, 10074, 10075:
			return true
		}
		return apiErr.Code == 503 || apiErr.Code == 408
	}
	return false
}
