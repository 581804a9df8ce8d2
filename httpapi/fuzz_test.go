package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/webhook"
)

// fuzzApp is the whole node (fx app, embedded server) for a fuzz target:
// started once per fuzzing process, requests go straight to its handler.
type fuzzApp struct {
	h    http.Handler
	hook jetstream.Stream
}

func startFuzzApp(f *testing.F) *fuzzApp {
	f.Helper()
	a := startApp(f, testYAML, "--admin-token", "fuzz-admin-token")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := a.nats.JS.Stream(ctx, "HOOKS")
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzApp{h: a.http.Handler, hook: st}
}

func (a *fuzzApp) state(t *testing.T) jetstream.StreamState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := a.hook.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// FuzzHookRequest sends arbitrary hook requests — method, tenant and
// source path segments, headers ("Name: value" lines), body — to the real
// edge and checks the contract: no panic; a status the protocol knows; a
// JSON body and an X-Request-Id on every answer; a 202 only for a hook that
// is now the last message of the HOOKS stream, with the id of the body and
// of X-Hook-Id; nothing stored on any other answer (a 503 may have stored
// it: its ack was lost).
//
//	go test ./edge -run '^$' -fuzz FuzzHookRequest -fuzztime 60s
func FuzzHookRequest(f *testing.F) {
	body := []byte(`{"id":"evt_1","type":"ping"}`)
	ts := time.Now().Unix()
	for _, s := range []struct {
		method         byte
		tenant, source string
		hdr            string
		body           []byte
	}{
		{0, "t", "s", "Idempotency-Key: k1", body},
		{0, "t", "s", "", nil},
		{0, "acme", "gh", "X-GitHub-Delivery: d1\nX-Hub-Signature-256: " + webhook.SignGitHub("It's a Secret to Everybody", body), body},
		{0, "acme", "gh", "X-GitHub-Delivery: d1\nX-Hub-Signature-256: sha256=00", body},
		{0, "acme", "pay", "Stripe-Signature: " + webhook.SignStripe("whsec_test", ts, body), body},
		{0, "acme", "raw", "X-Event-Id: e1", bytes.Repeat([]byte("x"), 65)},
		{0, "slow", "s", "", body},
		{1, "t", "s", "", body},
		{0, "a*b", "s", "", body},
		{0, "t", "..", "", body},
		{0, "t%2Fx", "s", "", body},
		{0, strings.Repeat("a", 129), "s", "", body},
		{0, "t", "s", "Idempotency-Key: " + strings.Repeat("k", 300), body},
		{0, "t", "s", "Content-Length: 5", body},
	} {
		f.Add(s.method, s.tenant, s.source, s.hdr, s.body)
	}
	a := startFuzzApp(f)
	methods := []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodDelete, "PATCH", "OPTIONS", "HEAD"}
	f.Fuzz(func(t *testing.T, method byte, tenant, source, hdr string, body []byte) {
		m := methods[int(method)%len(methods)]
		p := "/v1/hooks/" + tenant + "/" + source
		u, err := url.ParseRequestURI(p)
		if err != nil || strings.ContainsAny(p, "?#") {
			return // not a request line an HTTP server would hand over
		}
		req := httptest.NewRequest(m, "http://edge.test/", bytes.NewReader(body))
		req.URL = u
		req.RequestURI = p
		for line := range strings.SplitSeq(hdr, "\n") {
			k, v, ok := strings.Cut(line, ":")
			k = strings.TrimSpace(k)
			if !ok || k == "" || !validHeader(k, v) {
				continue
			}
			req.Header.Add(k, strings.TrimSpace(v))
		}
		before := a.state(t)
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		after := a.state(t)
		res := rec.Result()
		raw, _ := io.ReadAll(res.Body)
		stored := after.Msgs - before.Msgs

		if res.Header.Get("X-Request-Id") == "" {
			t.Errorf("%d without X-Request-Id", res.StatusCode)
		}
		switch res.StatusCode {
		case 200, 202, 400, 401, 404, 405, 409, 413, 429, 503:
		default:
			// 307 included: unclean paths are 400 before the mux
			// (faults.TestUncleanPaths).
			t.Fatalf("%s %q: status %d %s", m, p, res.StatusCode, raw)
		}
		var b struct {
			Status    string `json:"status"`
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
			Error     string `json:"error"`
		}
		if m != http.MethodHead {
			if err := json.Unmarshal(raw, &b); err != nil {
				t.Fatalf("%s %q: %d with a body that is not JSON: %q", m, p, res.StatusCode, raw)
			}
		}
		switch res.StatusCode {
		case 202:
			if b.Status != "accepted" || b.ID == "" || res.Header.Get("X-Hook-Id") != b.ID {
				t.Fatalf("202 %s, X-Hook-Id %q", raw, res.Header.Get("X-Hook-Id"))
			}
			if stored != 1 {
				t.Fatalf("202 for hook %s but the stream grew by %d", b.ID, stored)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			msg, err := a.hook.GetMsg(ctx, after.LastSeq)
			if err != nil || msg.Header.Get("Sluice-Hook-Id") != b.ID {
				t.Fatalf("202 for hook %s; last stored message: %v %v", b.ID, msg, err)
			}
			if msg.Header.Get("Sluice-Tenant") != tenant && tenant == strings.TrimSpace(tenant) {
				// The tenant as the handler decoded it.
				if dec, _ := url.PathUnescape(tenant); msg.Header.Get("Sluice-Tenant") != dec {
					t.Fatalf("stored under tenant %q, posted to %q", msg.Header.Get("Sluice-Tenant"), tenant)
				}
			}
			if !bytes.Equal(msg.Data, body) {
				t.Fatalf("stored body differs from the posted one")
			}
		case 200:
			if !b.Duplicate || b.ID == "" || res.Header.Get("X-Hook-Id") != b.ID || stored != 0 {
				t.Fatalf("200 %s, X-Hook-Id %q, stream grew by %d", raw, res.Header.Get("X-Hook-Id"), stored)
			}
		case 503:
			if stored > 1 {
				t.Fatalf("503 and the stream grew by %d", stored)
			}
		default:
			if b.Error == "" && m != http.MethodHead {
				t.Fatalf("%d without an error: %s", res.StatusCode, raw)
			}
			if stored != 0 {
				t.Fatalf("%d %s but the stream grew by %d", res.StatusCode, raw, stored)
			}
		}
	})
}

// validHeader reports whether net/http would send this header field.
func validHeader(k, v string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return !strings.EqualFold(k, "Host") && !strings.EqualFold(k, "Content-Length") && !strings.EqualFold(k, "Transfer-Encoding")
}
