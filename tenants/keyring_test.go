package tenants_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/tenants"
)

func newKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestKeyringSealsAndRotates(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	old, err := tenants.ParseKeyring([]byte("# keys\nk1 " + k1 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := old.Seal("acme", "gh", "s1", "top-secret-value")
	if err != nil {
		t.Fatal(err)
	}
	if sealed.KeyID != "k1" || strings.Contains(string(sealed.Data), "top-secret") {
		t.Fatalf("sealed %+v", sealed)
	}
	// Rotation: the new key seals, the old one still opens.
	both, err := tenants.ParseKeyring([]byte("k2 " + k2 + "\nk1 " + k1 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := both.Open("acme", "gh", "s1", sealed); err != nil || got != "top-secret-value" {
		t.Fatalf("open with the rotated keyring: %q %v", got, err)
	}
	if s2, _ := both.Seal("acme", "gh", "s2", "x"); s2.KeyID != "k2" {
		t.Fatalf("sealed with %s, want k2", s2.KeyID)
	}
	// Bound to its place: another source or id does not open it.
	for _, c := range [][3]string{{"globex", "gh", "s1"}, {"acme", "pay", "s1"}, {"acme", "gh", "s2"}} {
		if _, err := both.Open(c[0], c[1], c[2], sealed); !errors.Is(err, tenants.ErrSealed) {
			t.Errorf("%v opened: %v", c, err)
		}
	}
	// Without the key: fail closed, naming the key id.
	newOnly, _ := tenants.ParseKeyring([]byte("k2 " + k2))
	if _, err := newOnly.Open("acme", "gh", "s1", sealed); !errors.Is(err, tenants.ErrNoKey) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("open without k1: %v", err)
	}
	var none *tenants.Keyring
	if _, err := none.Seal("a", "b", "c", "d"); !errors.Is(err, tenants.ErrNoKey) {
		t.Fatalf("seal without keys: %v", err)
	}
	if old.Fingerprint("a") == old.Fingerprint("b") || !strings.HasPrefix(old.Fingerprint("a"), "hmac-sha256:") {
		t.Fatal("fingerprints")
	}
}

func TestKeyringErrorsNameTheLineNotTheKey(t *testing.T) {
	short := base64.StdEncoding.EncodeToString([]byte("sixteen-byte-key"))
	for _, c := range []struct{ file, want string }{
		{"", "no key"},
		{"# only a comment\n", "no key"},
		{"k1 " + short, "line 1: key k1: want the base64 of 32"},
		{"\nk.1 " + newKey(t), "line 2: want"},
		{"k1", "line 1: want"},
		{fmt.Sprintf("k1 %s\nk1 %s", newKey(t), newKey(t)), "line 2: duplicate key id k1"},
	} {
		_, err := tenants.ParseKeyring([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) || (len(c.file) > 3 && strings.Contains(err.Error(), c.file[3:])) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	rate := func(r float64, b int64) *config.Rate { return &config.Rate{Rate: r, Burst: b} }
	for _, c := range []struct {
		t     tenants.Tenant
		field string
	}{
		{tenants.Tenant{Name: "a/b"}, "name"},
		{tenants.Tenant{Name: "a", Limits: &tenants.Limits{Hooks: rate(0, 1)}}, "limits.hooks"},
		{tenants.Tenant{Name: "a", Limits: &tenants.Limits{}}, "limits"},
		{tenants.Tenant{Name: "a", Sources: map[string]*tenants.Source{"gh": {SourceSettings: tenants.SourceSettings{Dedupe: "nope:x"}}}}, "sources.gh.dedupe"},
		{tenants.Tenant{Name: "a", Sources: map[string]*tenants.Source{"gh": {SourceSettings: tenants.SourceSettings{MaxBodyBytes: -1}}}}, "sources.gh.max_body_bytes"},
		{tenants.Tenant{Name: "a", Sources: map[string]*tenants.Source{"gh": {Verify: &tenants.Verify{Scheme: "bitbucket"}}}}, "sources.gh.verify.scheme"},
		{tenants.Tenant{Name: "a", Sources: map[string]*tenants.Source{"gh": {Verify: &tenants.Verify{Scheme: "github", Params: map[string]string{"x": "y"}}}}}, "sources.gh.verify.params.x"},
		{tenants.Tenant{Name: "a", Sources: map[string]*tenants.Source{"gh": {Verify: &tenants.Verify{Scheme: "github"}}}}, "sources.gh.secret"},
		{tenants.Tenant{Name: "a", Sources: map[string]*tenants.Source{"gh": {SourceSettings: tenants.SourceSettings{Limits: &tenants.Limits{Bytes: rate(1, 0)}}}}}, "sources.gh.limits.bytes"},
		{tenants.Tenant{Name: "a", Sources: map[string]*tenants.Source{"..": {}}}, "sources..."},
	} {
		var fe *tenants.FieldError
		if err := c.t.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want field %s", c.t, err, c.field)
		}
	}
}

// TestSourceStoredForm pins a source record's JSON, which nodes of every
// version read from the tenants bucket: its settings are flat beside
// verify and secrets (SourceSettings is embedded, not a nested object).
func TestSourceStoredForm(t *testing.T) {
	s := tenants.Source{
		Verify:  &tenants.Verify{Scheme: "github"},
		Secrets: []tenants.Secret{{ID: "s1", Fingerprint: "f", CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}},
		SourceSettings: tenants.SourceSettings{
			Dedupe: "header:X-Id", MaxBodyBytes: 10, EventType: "github", Handshake: "slack",
			Methods: []string{"POST"}, ContentTypes: []string{"application/json"}, IPAllow: []string{"10.0.0.0/8"},
			Limits: &tenants.Limits{Hooks: &config.Rate{Rate: 1, Burst: 2}},
		},
	}
	got, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"verify":{"scheme":"github"},"secrets":[{"id":"s1","fingerprint":"f","created_at":"2026-01-01T00:00:00Z"}],` +
		`"dedupe":"header:X-Id","max_body_bytes":10,"event_type":"github","handshake":"slack","methods":["POST"],` +
		`"content_types":["application/json"],"ip_allow":["10.0.0.0/8"],"limits":{"hooks":{"rate":1,"burst":2}}}`
	if string(got) != want {
		t.Fatalf("a source's stored form changed:\n got %s\nwant %s", got, want)
	}
	var back tenants.Source
	if err := json.Unmarshal([]byte(want), &back); err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("decoding the stored form: %+v, %v; want %+v", back, err, s)
	}
}
