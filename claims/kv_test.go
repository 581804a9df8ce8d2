package claims_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func listKeys(t *testing.T, b *kvstore.Bucket) []string {
	t.Helper()
	l, err := b.KV().ListKeys(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestKVStoredForm(t *testing.T) {
	t.Parallel()
	ctx, b, s := kvClaims(t)

	long := strings.Repeat("d", 201)
	cid := id("acme", "gh.x", long)
	r := claim(t, s, cid, "h1", 1500*time.Millisecond)
	sum := sha256.Sum256([]byte(long))
	wantKey := "acme.gh=2Ex.sha256=3A" + hex.EncodeToString(sum[:])
	if got := claims.KVKey(cid); got != wantKey {
		t.Fatalf("KVKey = %q, want %q", got, wantKey)
	}
	if keys := listKeys(t, b); !slices.Equal(keys, []string{wantKey}) {
		t.Fatalf("bucket keys %q, want [%q]", keys, wantKey)
	}

	// Pending: readable JSON, TTL rounded up to whole seconds.
	e, err := b.KV().Get(ctx, wantKey)
	if err != nil || string(e.Value()) != `{"s":"p","h":"h1"}` || e.Revision() != r.Revision {
		t.Fatalf("pending entry %q rev %d, %v", e.Value(), e.Revision(), err)
	}
	rec, err := b.Get(ctx, wantKey)
	if err != nil || rec.TTL != 2*time.Second {
		t.Fatalf("pending record %+v, %v: want TTL 2s", rec, err)
	}

	// Committed: the settle keeps a TTL (it is not kv.Update).
	if err := s.Settle(ctx, cid, "h1", r.Revision, 90*time.Minute); err != nil {
		t.Fatal(err)
	}
	rec, err = b.Get(ctx, wantKey)
	if err != nil || string(rec.Value) != `{"s":"c","h":"h1"}` || rec.TTL != 90*time.Minute {
		t.Fatalf("committed record %+v (%q), %v: want TTL 90m", rec, rec.Value, err)
	}

	// Release leaves no key behind.
	if err := s.Release(ctx, cid, "h1", rec.Revision); err != nil {
		t.Fatal(err)
	}
	if keys := listKeys(t, b); len(keys) != 0 {
		t.Fatalf("keys after release: %q", keys)
	}
}

// TestKVDigestRecord pins the committed record with a digest, and reads
// records of the other forms: one written before digests were kept (no
// "d") is a committed claim without a digest; one with members this
// version does not know is read for those it knows.
func TestKVDigestRecord(t *testing.T) {
	t.Parallel()
	ctx, b, s := kvClaims(t)
	cid := id("acme", "api", "idem")
	r := claim(t, s, cid, "h1", time.Minute)
	if err := s.SettleOwn(ctx, cid, "h1", "sha256:ab", r.Revision, time.Hour); err != nil {
		t.Fatal(err)
	}
	rec, err := b.Get(ctx, claims.KVKey(cid))
	if err != nil || string(rec.Value) != `{"s":"c","h":"h1","d":"sha256:ab"}` || rec.TTL != time.Hour {
		t.Fatalf("committed record %+v (%q), %v", rec, rec.Value, err)
	}
	for value, want := range map[string]claims.State{
		`{"s":"c","h":"old"}`:                     {State: protocol.StateCommitted, HookID: "old"},
		`{"s":"c","h":"new","d":"x:1","later":7}`: {State: protocol.StateCommitted, HookID: "new", Digest: "x:1"},
		`{"s":"p","h":"held"}`:                    {State: protocol.StatePending, HookID: "held"},
	} {
		key := id("acme", "api", value)
		if _, err := b.Put(ctx, claims.KVKey(key), []byte(value), time.Hour); err != nil {
			t.Fatal(err)
		}
		st := get(t, s, key)
		if st.State != want.State || st.HookID != want.HookID || st.Digest != want.Digest {
			t.Errorf("%s reads as %+v, want %+v", value, st, want)
		}
		if want.State == protocol.StateCommitted {
			claimAs(t, s, key, "h9", time.Minute, claims.Duplicate, want.HookID)
		}
	}
}

func TestKVUnreadableRecord(t *testing.T) {
	t.Parallel()
	ctx, b, s := kvClaims(t)
	cid := id("acme", "gh", "k")
	rev, err := b.Put(ctx, claims.KVKey(cid), []byte("not a claim"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, cid, "h1", time.Second); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Claim: %v", err)
	}
	if _, err := s.Get(ctx, cid); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Get: %v", err)
	}
	if err := s.Settle(ctx, cid, "h1", rev, time.Hour); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Settle: %v", err)
	}
	if err := s.Release(ctx, cid, "h1", rev); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Release: %v", err)
	}
}

func TestKVUnavailable(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	b := k.Bucket(t, kvstore.BucketConfig{Name: "claims"})
	rb := k.Bucket(t, claims.ReplayBucketConfig("replay", 10, 1))
	s, rs := newKV(t, b), newKVReplay(t, rb)
	cid := id("acme", "gh", "k")
	r := claim(t, s, cid, "h1", time.Minute)
	k.Server.Shutdown()

	// Every call gets its own budget: each must give up on its own.
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	if _, err := s.Claim(short(), id("acme", "gh", "k2"), "h1", time.Second); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Claim: %v", err)
	}
	if err := s.Settle(short(), cid, "h1", r.Revision, time.Hour); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Settle: %v", err)
	}
	if err := s.Release(short(), cid, "h1", r.Revision); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Release: %v", err)
	}
	if _, err := s.Get(short(), cid); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Get: %v", err)
	}
	if _, err := rs.Claim(short(), "ns", "k", 0); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("replay Claim: %v", err)
	}
}

func TestReplayBucketConfig(t *testing.T) {
	got := claims.ReplayBucketConfig("sluice_replay", 42, 3)
	if got.Name != "sluice_replay" || got.MaxMsgs != 42 || got.Replicas != 3 || !got.NoMarkers {
		t.Fatalf("config %+v", got)
	}
	if d := claims.ReplayBucketConfig("r", 0, 1); d.MaxMsgs != protocol.DefaultReplayCapacity {
		t.Fatalf("default capacity %d", d.MaxMsgs)
	}
}

func TestKVReplayStoredForm(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	b := k.Bucket(t, claims.ReplayBucketConfig("replay", 10, 1))
	info, err := k.JS.Stream(ctx, kvstore.StreamName("replay"))
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.MaxMsgs != 10 || c.Discard != jetstream.DiscardNew || c.SubjectDeleteMarkerTTL != 0 || !c.AllowMsgTTL {
		t.Fatalf("stream config: max msgs %d, discard %v, marker TTL %v, msg TTLs %v", c.MaxMsgs, c.Discard, c.SubjectDeleteMarkerTTL, c.AllowMsgTTL)
	}
	// A retain_until an hour away: the TTL is ~1 h.
	r := newKVReplay(t, b)
	until := time.Now().Add(time.Hour).Unix()
	if o, err := r.Claim(ctx, "acme/stripe", "evt.1", until); err != nil || o != protocol.Claimed {
		t.Fatalf("claim: %v, %v", o, err)
	}
	key := claims.ReplayKVKey("acme/stripe", "evt.1")
	if key != "acme=2Fstripe.evt=2E1" {
		t.Fatalf("ReplayKVKey = %q", key)
	}
	rec, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.TTL < time.Hour-time.Second || rec.TTL > time.Hour+time.Second || rec.TTL%time.Second != 0 {
		t.Fatalf("TTL %v, want ~1h in whole seconds", rec.TTL)
	}
	if want := `{"u":` + strconv.FormatInt(until, 10) + `}`; string(rec.Value) != want {
		t.Fatalf("value %q, want %q", rec.Value, want)
	}
}

func TestParseKVKey(t *testing.T) {
	for i, cid := range hostileIDs() {
		got, err := claims.ParseKVKey(claims.KVKey(cid))
		want := claims.ID{Tenant: cid.Tenant, Source: cid.Source, Key: claims.NormalizeKey(cid.Key)}
		if err != nil || got != want {
			t.Errorf("%d: ParseKVKey(KVKey(%q)) = %q, %v", i, cid, got, err)
		}
	}
	for _, bad := range []string{"", "a", "a.b", "a.b.c.d", "a.=4.c", "=.b.c", "a.b.=", "a.b.c*", strings.Repeat("t", 257) + ".s.k", "a.b." + strings.Repeat("k", 201)} {
		if _, err := claims.ParseKVKey(bad); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("ParseKVKey(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

// TestBucketConfigSwitchesExpiryMarkers opens one claims bucket with
// expiry events on, off and on again (what restarting a node with
// --claim-expiry-events toggled does): each time the stream's markers
// follow the setting, an expiring claim leaves a MaxAge marker only while
// they are on, and the claims already stored survive every switch.
func TestBucketConfigSwitchesExpiryMarkers(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	name := bucketName("switch")
	st := func() jetstream.Stream {
		s, err := k.JS.Stream(ctx, kvstore.StreamName(name))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	kept := id("acme", "gh", "kept")
	for i, on := range []bool{true, false, true} {
		b := k.Bucket(t, claims.BucketConfig(name, 1, claims.WithExpiryEvents(on)))
		s := newKV(t, b)
		cfg := st().CachedInfo().Config
		wantTTL := time.Duration(0)
		if on {
			wantTTL = time.Second
		}
		if cfg.SubjectDeleteMarkerTTL != wantTTL || !cfg.AllowMsgTTL {
			t.Fatalf("step %d (events %v): marker TTL %v, allow TTL %v", i, on, cfg.SubjectDeleteMarkerTTL, cfg.AllowMsgTTL)
		}
		if i == 0 {
			r := claim(t, s, kept, "h0", time.Minute)
			if err := s.Settle(ctx, kept, "h0", r.Revision, hour); err != nil {
				t.Fatal(err)
			}
		}
		claimAs(t, s, kept, "hx", time.Minute, claims.Duplicate, "h0")

		// A claim that expires: with markers the server writes a MaxAge
		// marker after it (the stream's last sequence moves on; the marker
		// lives 1 s), without it writes nothing.
		exp := id("acme", "gh", "expires-"+strconv.Itoa(i))
		r := claim(t, s, exp, "h1", time.Second)
		subj := b.Subject(claims.KVKey(exp))
		testkit.Eventually(t, waitTTL, func() bool {
			_, err := st().GetLastMsgForSubject(ctx, subj)
			return errors.Is(err, jetstream.ErrMsgNotFound)
		}, "expired claim (and its marker, if any) gone")
		info, err := st().Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Nothing else writes to the bucket meanwhile: a later sequence is
		// the marker.
		if wrote := info.State.LastSeq > r.Revision; wrote != on {
			t.Fatalf("step %d (events %v): last seq %d after the claim at %d", i, on, info.State.LastSeq, r.Revision)
		}
		claimAs(t, s, exp, "h2", time.Minute, claims.OK, "h2")
	}
}

// The started writes of the owner's pipelines: a started claim writes what
// Claim writes; a started settle what SettleOwn writes, and a refused one
// (the claim is not at the revision any more) is not done and changes
// nothing, and SettleOwn then says why.
func TestKVStartedWrites(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	s := newKV(t, k.Bucket(t, claims.BucketConfig("started", 0)))

	t.Run("claim", func(t *testing.T) {
		cid := id("acme", "gh", "d1")
		c, err := s.StartClaim(cid, "h1", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		res, done, err := c.Wait(ctx)
		if err != nil || !done || res.Outcome != claims.OK || res.HookID != "h1" || res.Revision == 0 {
			t.Fatalf("started claim: %+v %v %v", res, done, err)
		}
		// A taken key: not done, nothing written; Claim answers as always.
		c, err = s.StartClaim(cid, "h2", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r2, done, err := c.Wait(ctx); done || err != nil {
			t.Fatalf("taken key: %+v %v %v, want not done", r2, done, err)
		}
		if r3, err := s.Claim(ctx, cid, "h2", 30*time.Second); err != nil || r3.Outcome != claims.Pending || r3.HookID != "h1" || r3.Revision != res.Revision {
			t.Fatalf("claim of the taken key: %+v %v", r3, err)
		}
		// Invalid arguments start nothing.
		if _, err := s.StartClaim(cid, "", time.Second); !errors.Is(err, protocol.ErrInvalid) {
			t.Fatalf("empty hook id: %v", err)
		}
		if _, err := s.StartClaim(cid, "h3", -time.Second); !errors.Is(err, protocol.ErrInvalid) {
			t.Fatalf("negative ttl: %v", err)
		}
	})
	t.Run("settle", func(t *testing.T) {
		cid := id("acme", "gh", "d2")
		res := claimAs(t, s, cid, "h1", time.Minute, claims.OK, "h1")
		c, err := s.StartSettleOwn(cid, "h1", res.Revision, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := c.Wait(ctx); !done || err != nil {
			t.Fatalf("started settle: %v %v", done, err)
		}
		st, err := s.Get(ctx, cid)
		if err != nil || st.State != protocol.StateCommitted || st.HookID != "h1" || st.ExpiresIn <= 59*time.Minute {
			t.Fatalf("after the started settle: %+v %v", st, err)
		}
		// Again at the same revision: refused, not done, the record unchanged.
		c, err = s.StartSettleOwn(cid, "h1", res.Revision, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := c.Wait(ctx); done || err != nil {
			t.Fatalf("a second started settle: %v %v, want not done", done, err)
		}
		if st2, err := s.Get(ctx, cid); err != nil || st2.Revision != st.Revision {
			t.Fatalf("a refused settle changed the claim: %+v %v", st2, err)
		}
		if err := s.SettleOwn(ctx, cid, "h1", "", res.Revision, time.Hour); !errors.Is(err, protocol.ErrClaimLost) {
			t.Fatalf("SettleOwn after it: %v, want protocol.ErrClaimLost", err)
		}
		if _, err := s.StartSettleOwn(cid, "h1", 0, time.Hour); !errors.Is(err, protocol.ErrInvalid) {
			t.Fatalf("revision 0: %v", err)
		}
	})
}
