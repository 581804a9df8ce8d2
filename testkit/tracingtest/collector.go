// Package tracingtest is an in-process OTLP/HTTP trace collector for
// tests: an httptest server that decodes what an OTLP/HTTP protobuf
// exporter sends and keeps the spans.
package tracingtest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-dev/sluice/testkit"
)

// Span is one received span, ids in lowercase hex ("" for no parent).
type Span struct {
	Name                   string
	TraceID, SpanID        string
	ParentID               string
	Kind                   tracepb.Span_SpanKind
	Attributes             map[string]string
	Service                string // the resource's service.name
	StatusError            bool
	StartUnixNano, EndNano uint64
}

// Collector receives OTLP/HTTP protobuf trace exports on /v1/traces.
type Collector struct {
	srv *httptest.Server

	mu    sync.Mutex
	spans []Span
}

// Start starts a collector, stopped when t ends. Point an exporter at it
// with OTEL_EXPORTER_OTLP_ENDPOINT=c.URL().
func Start(t testing.TB) *Collector {
	c := &Collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

// URL is the collector's base URL (the exporter appends /v1/traces).
func (c *Collector) URL() string { return c.srv.URL }

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// TracesData is wire-compatible with ExportTraceServiceRequest (both
	// are field 1: repeated ResourceSpans), without the gRPC service code.
	var req tracepb.TracesData
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(), Attributes: map[string]string{},
					Service: service, StatusError: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					StartUnixNano: s.GetStartTimeUnixNano(), EndNano: s.GetEndTimeUnixNano(),
				}
				for _, kv := range s.GetAttributes() {
					sp.Attributes[kv.GetKey()] = attrString(kv.GetValue())
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
}

func attrString(v interface {
	GetStringValue() string
}) string {
	return v.GetStringValue()
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// WaitFor polls (bounded) until ok holds for the spans received, and
// returns them.
func (c *Collector) WaitFor(t testing.TB, what string, ok func([]Span) bool) []Span {
	t.Helper()
	var spans []Span
	testkit.Eventually(t, 10*time.Second, func() bool {
		spans = c.Spans()
		return ok(spans)
	}, what)
	return spans
}
