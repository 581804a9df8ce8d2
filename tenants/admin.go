package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/webhook"
)

// Paging of GET /v1/admin/tenants.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// maxAdminBody bounds an admin request body.
	maxAdminBody = 64 << 10
	// maxAttempts bounds the read-modify-write retries of a write without
	// an expected revision.
	maxAttempts = 8
)

// Admin serves the tenant and source endpoints of the admin API (mounted
// by the edge behind the admin token, see Routes).
type Admin struct {
	reg     *Registry
	pol     *Policy
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration
}

// NewAdmin returns the admin endpoints over reg and pol, which must not be
// nil. Options: WithLogger, WithTimeout, WithClock; a bad one is an error
// wrapping protocol.ErrInvalidOption.
func NewAdmin(reg *Registry, pol *Policy, opts ...AdminOption) (*Admin, error) {
	if reg == nil || pol == nil {
		return nil, fmt.Errorf("%w: nil registry or policy", errInvalidOption)
	}
	a := &Admin{reg: reg, pol: pol, log: slog.New(slog.DiscardHandler), now: time.Now, timeout: protocol.DefaultTimeout}
	if err := option.Apply(a, opts, AdminOption.applyAdmin); err != nil {
		return nil, err
	}
	return a, nil
}

// Routes are the admin routes (httpapi.Config.AdminRoutes).
func (a *Admin) Routes() []httpapi.AdminRoute {
	const t, s = "/v1/admin/tenants/{tenant}", "/v1/admin/tenants/{tenant}/sources/{source}"
	return []httpapi.AdminRoute{
		{Pattern: "GET /v1/admin/tenants", Op: "list_tenants", Handler: a.list},
		{Pattern: "GET " + t, Op: "get_tenant", Handler: a.getTenant},
		{Pattern: "PUT " + t, Op: "put_tenant", Handler: a.putTenant},
		{Pattern: "DELETE " + t, Op: "delete_tenant", Handler: a.deleteTenant},
		{Pattern: "PUT " + s, Op: "put_source", Handler: a.putSource},
		{Pattern: "DELETE " + s, Op: "delete_source", Handler: a.deleteSource},
		{Pattern: "POST " + s + "/secrets", Op: "add_secret", Handler: a.addSecret},
		{Pattern: "DELETE " + s + "/secrets/{id}", Op: "delete_secret", Handler: a.deleteSecret},
		{Pattern: "POST /v1/admin/secrets/reseal", Op: "reseal", Handler: a.reseal},
	}
}

// apiError is an answer other than 2xx: an error of the contract and its
// reason ("" for none).
type apiError struct {
	e      protocol.Error
	reason string
}

func (e *apiError) Error() string { return e.e.Code }

func errAPI(e protocol.Error, reason string) *apiError {
	return &apiError{e: e, reason: reason}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers err: an apiError, a FieldError (400 naming the field), a
// conflict, or 503.
func (a *Admin) fail(w http.ResponseWriter, err error) {
	var ae *apiError
	var fe *FieldError
	var ce *conflictError
	switch {
	case errors.As(err, &ce):
		protocol.RevisionConflict.Write(w, map[string]any{"revision": ce.current})
	case errors.As(err, &ae):
		var extra map[string]any
		if ae.reason != "" {
			extra = map[string]any{"reason": ae.reason}
		}
		ae.e.Write(w, extra)
	case errors.As(err, &fe):
		protocol.InvalidRequest.Write(w, map[string]any{"field": fe.Field, "reason": fe.Reason})
	default:
		a.log.Warn("admin: tenants store failed", "error", err)
		w.Header().Set("Retry-After", "1")
		protocol.StoreUnavailable.Write(w, nil)
	}
}

// pathNames reads and checks the path's tenant (and source).
func pathNames(r *http.Request, withSource bool) (tenant, source string, err error) {
	tenant = r.PathValue("tenant")
	if !config.ValidName(tenant) {
		return "", "", errAPI(protocol.InvalidTenant, "")
	}
	if withSource {
		source = r.PathValue("source")
		if !config.ValidName(source) {
			return "", "", errAPI(protocol.InvalidSource, "")
		}
	}
	return tenant, source, nil
}

// decode reads a JSON body into v (unknown fields refused).
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errAPI(protocol.InvalidRequest, "body must be a JSON object")
		}
		// encoding/json errors name fields and offsets, never values.
		return errAPI(protocol.InvalidRequest, err.Error())
	}
	return nil
}

// revField is the optional "revision" of a write's body.
type revField struct {
	Revision uint64 `json:"revision"`
}

func (f *revField) revision() uint64 { return f.Revision }

// parse reads a write's path names, its body into in (nil: no body) and
// the revision it expects; on an error it answers and returns ok=false.
func (a *Admin) parse(w http.ResponseWriter, r *http.Request, withSource bool, in interface{ revision() uint64 }) (tenant, source string, expect uint64, ok bool) {
	tenant, source, err := pathNames(r, withSource)
	var bodyRev uint64
	if err == nil && in != nil {
		if err = decode(r, in); err == nil {
			bodyRev = in.revision()
		}
	}
	if err == nil {
		expect, err = expected(r, bodyRev)
	}
	if err != nil {
		a.fail(w, err)
		return "", "", 0, false
	}
	return tenant, source, expect, true
}

// expected is the revision a write must find: If-Match, else the body's
// "revision" (0: none, read-modify-write).
func expected(r *http.Request, body uint64) (uint64, error) {
	im := strings.TrimSpace(r.Header.Get("If-Match"))
	if im == "" {
		return body, nil
	}
	n, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(im, "W/"), `"`), 10, 64)
	if err != nil || n == 0 {
		return 0, errAPI(protocol.InvalidRequest, `If-Match must be a revision, e.g. "42"`)
	}
	if body != 0 && body != n {
		return 0, errAPI(protocol.InvalidRequest, "If-Match and revision differ")
	}
	return n, nil
}

// How mutate treats a missing record.
const (
	mustExist  = iota // 404 tenant_not_found
	mayCreate         // it starts empty
	mustCreate        // and an existing one is 409 tenant_exists (If-None-Match: *)
)

// mutate applies change to tenant's record, revision-checked: with expect
// > 0 the record must be at that revision (else 409 revision_conflict);
// without, the read-modify-write is retried on a concurrent change, so
// no update is lost.
func (a *Admin) mutate(w http.ResponseWriter, r *http.Request, tenant string, expect uint64, create int, op string, change func(t *Tenant, now time.Time) error) {
	ctx, cancel := context.WithTimeout(r.Context(), 8*a.timeout)
	defer cancel()
	t, created, err := a.update(ctx, tenant, expect, create, op, change)
	if err != nil {
		a.fail(w, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	a.reply(w, code, t)
}

// conflictError is a revision-checked write that found another revision
// (409 revision_conflict with the current one).
type conflictError struct{ current uint64 }

func (e *conflictError) Error() string {
	return fmt.Sprintf("revision conflict (current %d)", e.current)
}

// update is mutate's store part: it returns the written record and
// whether it was created.
func (a *Admin) update(ctx context.Context, tenant string, expect uint64, create int, op string, change func(t *Tenant, now time.Time) error) (*Tenant, bool, error) {
	if a.pol.FileTenant(tenant) {
		return nil, false, errAPI(protocol.ManagedByFile, "tenant "+tenant+" is listed in the --config file, which wins: edit the file (and SIGHUP) or remove it there first")
	}
	for range maxAttempts {
		t, err := a.reg.get(ctx, tenant)
		created := false
		switch {
		case errors.Is(err, ErrNotFound) && create != mustExist && expect == 0:
			if a.reg.count() >= MaxTenants {
				return nil, false, errAPI(protocol.TooManyTenants, fmt.Sprintf("at most %d tenants", MaxTenants))
			}
			t, created = &Tenant{Name: tenant, Sources: map[string]*Source{}}, true
		case errors.Is(err, ErrNotFound):
			return nil, false, errAPI(protocol.TenantNotFound, "")
		case err != nil:
			return nil, false, err
		case create == mustCreate:
			return nil, false, errAPI(protocol.TenantExists, "")
		}
		if expect > 0 && t.Revision != expect {
			return nil, false, &conflictError{current: t.Revision}
		}
		now := a.now().UTC()
		next := t.clone()
		if next.Sources == nil {
			next.Sources = map[string]*Source{}
		}
		if err := change(next, now); err != nil {
			return nil, false, err
		}
		next.UpdatedAt = now
		rev, err := a.reg.put(ctx, next, t.Revision)
		if errors.Is(err, ErrConflict) {
			if expect > 0 {
				cur, gerr := a.reg.get(ctx, tenant)
				if gerr != nil {
					return nil, false, &conflictError{}
				}
				return nil, false, &conflictError{current: cur.Revision}
			}
			continue // someone else wrote: apply the change to theirs
		}
		if err != nil {
			return nil, false, err
		}
		next.Revision = rev
		a.log.Info("admin: tenant record written", "op", op, "tenant", tenant, "revision", rev)
		return next, created, nil
	}
	return nil, false, errAPI(protocol.RevisionConflict, "too many concurrent updates; retry")
}

// reply writes a record without its sealed secrets, with its revision as
// ETag.
func (a *Admin) reply(w http.ResponseWriter, code int, t *Tenant) {
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(t.Revision, 10)))
	writeJSON(w, code, t.Redacted())
}

func (a *Admin) getTenant(w http.ResponseWriter, r *http.Request) {
	tenant, _, err := pathNames(r, false)
	if err != nil {
		a.fail(w, err)
		return
	}
	if a.pol.FileTenant(tenant) {
		writeJSON(w, http.StatusOK, map[string]any{"name": tenant, "managed": "file", "sources": slices.Sorted(maps.Keys(a.pol.Config().Tenants[tenant].Sources))})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 4*a.timeout)
	defer cancel()
	t, err := a.reg.get(ctx, tenant)
	if errors.Is(err, ErrNotFound) {
		err = errAPI(protocol.TenantNotFound, "")
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	a.reply(w, http.StatusOK, t)
}

// listItem is one tenant of a page.
type listItem struct {
	Name     string   `json:"name"`
	Managed  string   `json:"managed"` // "api" or "file"
	Revision uint64   `json:"revision,omitempty"`
	Sources  []string `json:"sources"`
}

// list is GET /v1/admin/tenants?limit=N&after=NAME: tenants in name order,
// the file's and the records', at most limit (1..MaxPageSize) per page;
// "next" is the after of the next page.
func (a *Admin) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := DefaultPageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			protocol.InvalidRequest.Write(w, map[string]any{"field": "limit", "reason": fmt.Sprintf("must be 1..%d", MaxPageSize)})
			return
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !config.ValidName(after) {
		protocol.InvalidRequest.Write(w, map[string]any{"field": "after", "reason": "not a tenant name"})
		return
	}
	cfg := a.pol.Config()
	recs, _ := a.reg.page(after, limit+1)
	var file []string
	for n := range cfg.Tenants {
		if n > after {
			file = append(file, n)
		}
	}
	sort.Strings(file)
	items := make([]listItem, 0, limit)
	i, j := 0, 0
	for len(items) < limit && (i < len(recs) || j < len(file)) {
		switch {
		case j < len(file) && (i >= len(recs) || file[j] <= recs[i].Name):
			if i < len(recs) && file[j] == recs[i].Name {
				i++ // the file wins
			}
			items = append(items, listItem{Name: file[j], Managed: "file", Sources: slices.Sorted(maps.Keys(cfg.Tenants[file[j]].Sources))})
			j++
		default:
			t := recs[i]
			items = append(items, listItem{Name: t.Name, Managed: "api", Revision: t.Revision, Sources: slices.Sorted(maps.Keys(t.Sources))})
			i++
		}
	}
	out := map[string]any{"tenants": items}
	if (i < len(recs) || j < len(file)) && len(items) > 0 {
		out["next"] = items[len(items)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
}

type tenantInput struct {
	AllowUnknown *bool   `json:"allow_unknown"`
	Limits       *Limits `json:"limits"`
	// Sources are created or replaced with the tenant's settings, in the
	// same revision-checked write, each as PUT …/sources/{name} would (the
	// record's other sources are kept): a tenant and its first source are
	// written together or not at all.
	Sources map[string]*sourceFields `json:"sources"`
	revField
}

// putTenant creates a tenant (201) or replaces its settings (200); its
// sources are kept (see the source endpoints). With If-None-Match: * it
// only creates (409 tenant_exists).
func (a *Admin) putTenant(w http.ResponseWriter, r *http.Request) {
	var in tenantInput
	tenant, _, expect, ok := a.parse(w, r, false, &in)
	if !ok {
		return
	}
	create := mayCreate
	if strings.TrimSpace(r.Header.Get("If-None-Match")) == "*" {
		create = mustCreate
	}
	for _, sn := range slices.Sorted(maps.Keys(in.Sources)) {
		if !config.ValidName(sn) {
			a.fail(w, fieldErr("sources", "invalid source name %q", sn))
			return
		}
		if in.Sources[sn] == nil {
			a.fail(w, fieldErr("sources."+sn, "must be an object"))
			return
		}
	}
	a.mutate(w, r, tenant, expect, create, "put_tenant", func(t *Tenant, now time.Time) error {
		t.AllowUnknown, t.Limits = in.AllowUnknown, in.Limits
		for _, sn := range slices.Sorted(maps.Keys(in.Sources)) {
			if err := a.setSource(t, tenant, sn, in.Sources[sn], now); err != nil {
				return err
			}
		}
		return t.Validate()
	})
}

func (a *Admin) deleteTenant(w http.ResponseWriter, r *http.Request) {
	tenant, _, expect, ok := a.parse(w, r, false, nil)
	if !ok {
		return
	}
	if a.pol.FileTenant(tenant) {
		a.fail(w, errAPI(protocol.ManagedByFile, "remove it from the --config file"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 8*a.timeout)
	defer cancel()
	switch err := a.reg.remove(ctx, tenant, expect); {
	case errors.Is(err, ErrNotFound):
		a.fail(w, errAPI(protocol.TenantNotFound, ""))
	case errors.Is(err, ErrConflict):
		a.fail(w, &conflictError{})
	case err != nil:
		a.fail(w, err)
	default:
		a.log.Info("admin: tenant record deleted", "tenant", tenant)
		writeJSON(w, http.StatusOK, map[string]any{"name": tenant, "deleted": true})
	}
}

type sourceInput struct {
	sourceFields
	revField
}

// sourceFields are a source's settings as a write gives them.
type sourceFields struct {
	Verify *Verify `json:"verify"`
	SourceSettings
	Secret         *string    `json:"secret"`
	SecretNotAfter *time.Time `json:"secret_not_after"`
}

// putSource creates or replaces a source's settings. A secret in the body
// replaces the source's secrets; without one they are kept (a new scheme
// needs a new secret). A verifying source stays verifying: leaving verify
// out is 400.
func (a *Admin) putSource(w http.ResponseWriter, r *http.Request) {
	var in sourceInput
	tenant, source, expect, ok := a.parse(w, r, true, &in)
	if !ok {
		return
	}
	a.mutate(w, r, tenant, expect, mustExist, "put_source", func(t *Tenant, now time.Time) error {
		if err := a.setSource(t, tenant, source, &in.sourceFields, now); err != nil {
			return err
		}
		return t.Validate()
	})
}

// setSource creates or replaces t's source from in (putSource, and the
// sources of putTenant).
func (a *Admin) setSource(t *Tenant, tenant, source string, in *sourceFields, now time.Time) error {
	old := t.Sources[source]
	s := &Source{Verify: in.Verify, SourceSettings: in.SourceSettings}
	if len(t.Sources) >= MaxSources && old == nil {
		return fieldErr("sources", "at most %d sources per tenant", MaxSources)
	}
	p := "sources." + source
	if err := s.Verify.validate(p + ".verify"); err != nil {
		return err
	}
	switch {
	case s.Verify == nil && old != nil && old.Verify != nil:
		// Never turn a verifying source unsigned by leaving a field out.
		return fieldErr(p+".verify", "the source verifies with %s: give verify (to make it unsigned, delete the source and create it again)", old.Verify.Scheme)
	case in.Secret != nil:
		if s.Verify == nil {
			return fieldErr(p+".secret", "a secret needs verify")
		}
		sec, err := a.seal(tenant, source, s, "s1", *in.Secret, in.SecretNotAfter, now)
		if err != nil {
			return err
		}
		s.Secrets = []Secret{sec}
	case s.Verify != nil && (old == nil || old.Verify == nil || old.Verify.Scheme != s.Verify.Scheme):
		return fieldErr(p+".secret", "verify %s needs a secret", s.Verify.Scheme)
	case s.Verify != nil:
		s.Secrets = old.Secrets
	}
	t.Sources[source] = s
	return nil
}

// seal checks a new secret against the source's scheme and seals it.
func (a *Admin) seal(tenant, source string, s *Source, id, secret string, notAfter *time.Time, now time.Time) (Secret, error) {
	p := "sources." + source + ".secret"
	keys := a.reg.Keys()
	if keys == nil {
		return Secret{}, fieldErr(p, "this node has no --secrets-key-file: secrets are only stored encrypted")
	}
	if secret == "" || len(secret) > MaxSecretBytes {
		return Secret{}, fieldErr(p, "must be 1..%d bytes", MaxSecretBytes)
	}
	sc, err := s.Verify.scheme("sources." + source + ".verify")
	if err != nil {
		return Secret{}, err
	}
	if _, err := webhook.NewSchemeVerifier(sc, secret); err != nil { // never contains the secret
		return Secret{}, fieldErr(p, "%v", err)
	}
	if notAfter != nil && !notAfter.After(now) {
		return Secret{}, fieldErr(p+"_not_after", "must be in the future")
	}
	sealed, err := keys.Seal(tenant, source, id, secret)
	if err != nil {
		return Secret{}, err
	}
	return Secret{ID: id, Fingerprint: keys.Fingerprint(secret), CreatedAt: now, NotAfter: notAfter, Sealed: sealed}, nil
}

func (a *Admin) deleteSource(w http.ResponseWriter, r *http.Request) {
	tenant, source, expect, ok := a.parse(w, r, true, nil)
	if !ok {
		return
	}
	a.mutate(w, r, tenant, expect, mustExist, "delete_source", func(t *Tenant, _ time.Time) error {
		if _, ok := t.Sources[source]; !ok {
			return errAPI(protocol.SourceNotFound, "")
		}
		delete(t.Sources, source)
		return nil
	})
}

type secretInput struct {
	Secret   string     `json:"secret"`
	NotAfter *time.Time `json:"not_after"`
	// RetireOthersAfter gives every other secret a not-after this long
	// from now (unless it already ends sooner): "0s" retires them at once,
	// "24h" overlaps for a day.
	RetireOthersAfter *string `json:"retire_others_after"`
	revField
}

// addSecret adds a secret to a verifying source (rotation); secrets past
// their not-after are dropped to make room.
func (a *Admin) addSecret(w http.ResponseWriter, r *http.Request) {
	var in secretInput
	tenant, source, expect, ok := a.parse(w, r, true, &in)
	if !ok {
		return
	}
	var retire time.Duration = -1
	if in.RetireOthersAfter != nil {
		d, err := time.ParseDuration(*in.RetireOthersAfter)
		if err != nil || d < 0 {
			a.fail(w, fieldErr("retire_others_after", "want a duration >= 0, e.g. 24h"))
			return
		}
		retire = d
	}
	a.mutate(w, r, tenant, expect, mustExist, "add_secret", func(t *Tenant, now time.Time) error {
		s := t.Sources[source]
		if s == nil {
			return errAPI(protocol.SourceNotFound, "")
		}
		if s.Verify == nil {
			return fieldErr("sources."+source+".verify", "the source does not verify: set verify with PUT first")
		}
		live := s.Secrets[:0]
		for _, sec := range s.Secrets {
			if sec.LiveAt(now) {
				if retire >= 0 && (sec.NotAfter == nil || sec.NotAfter.After(now.Add(retire))) {
					na := now.Add(retire)
					sec.NotAfter = &na
				}
				live = append(live, sec)
			}
		}
		s.Secrets = live
		sec, err := a.seal(tenant, source, s, s.nextSecretID(), in.Secret, in.NotAfter, now)
		if err != nil {
			return err
		}
		s.Secrets = append(s.Secrets, sec)
		return t.Validate()
	})
}

// deleteSecret retires a secret at once.
func (a *Admin) deleteSecret(w http.ResponseWriter, r *http.Request) {
	tenant, source, expect, ok := a.parse(w, r, true, nil)
	if !ok {
		return
	}
	id := r.PathValue("id")
	a.mutate(w, r, tenant, expect, mustExist, "delete_secret", func(t *Tenant, _ time.Time) error {
		s := t.Sources[source]
		if s == nil {
			return errAPI(protocol.SourceNotFound, "")
		}
		kept := s.Secrets[:0]
		for _, sec := range s.Secrets {
			if sec.ID != id {
				kept = append(kept, sec)
			}
		}
		switch {
		case len(kept) == len(s.Secrets):
			return errAPI(protocol.SecretNotFound, "")
		case len(kept) == 0:
			return fieldErr("sources."+source+".secrets", "the last secret of a verifying source: add another first, or delete the source")
		}
		s.Secrets = kept
		return nil
	})
}

// reseal is POST /v1/admin/secrets/reseal: every secret sealed with another
// key than this node's current one is sealed again with it (a key rotation's
// step once every node has the new key), revision-checked; a secret this
// node cannot open is reported and left as it is.
func (a *Admin) reseal(w http.ResponseWriter, r *http.Request) {
	keys := a.reg.Keys()
	if keys == nil {
		a.fail(w, errAPI(protocol.InvalidRequest, "this node has no --secrets-key-file"))
		return
	}
	resealed, failed := 0, []map[string]string{}
	for _, name := range a.reg.names() {
		if a.pol.FileTenant(name) || !a.reg.lookup(name).sealedWithOther(keys.Current()) {
			continue
		}
		ctx, cancel := context.WithTimeout(r.Context(), 8*a.timeout)
		n := 0
		_, _, err := a.update(ctx, name, 0, mustExist, "reseal", func(t *Tenant, _ time.Time) error {
			n = 0
			for sn, s := range t.Sources {
				for i, sec := range s.Secrets {
					if sec.Sealed == nil || sec.Sealed.KeyID == keys.Current() {
						continue
					}
					plain, err := keys.Open(name, sn, sec.ID, sec.Sealed)
					if err != nil {
						return err
					}
					if s.Secrets[i].Sealed, err = keys.Seal(name, sn, sec.ID, plain); err != nil {
						return err
					}
					n++
				}
			}
			return nil
		})
		cancel()
		if err != nil {
			failed = append(failed, map[string]string{"tenant": name, "error": err.Error()})
			continue
		}
		resealed += n
	}
	a.log.Info("admin: secrets resealed", "key", keys.Current(), "secrets", resealed, "failed", len(failed))
	writeJSON(w, http.StatusOK, map[string]any{"key": keys.Current(), "resealed": resealed, "failed": failed})
}
