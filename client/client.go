// Package client is a Go client of the sluice NATS micro service: one
// method per endpoint of docs/PROTOCOL.md ("NATS"), over plain NATS
// request/reply, plus the fire-and-forget settle and release events. It
// speaks the public contract only (package protocol's types; it imports no
// other package of sluice), so it works against any sluice fleet. Go code
// inside a sluice node uses quota.Router instead.
//
//	c, err := client.New(nc)
//	rep, err := c.Hit(ctx, protocol.HitRequest{Charges: …, Claim: …})
//	switch rep.Result { case protocol.ResultOK: …; case protocol.ResultRateLimited: … }
//	err = c.Settle(ctx, tenant, source, key, hookID, rep.Revision)
//
// # Results and errors
//
// Results that are not failures (rate_limited, duplicate, pending, a denied
// reserve, already_claimed, full) are values in the reply. Every error wraps
// exactly one sentinel of this package and, for an answer with micro's
// error headers, a *ServiceError with the code and reason:
//
//	400 invalid_request: …        ErrInvalid      the caller's fault; never retry
//	409 claim_lost                ErrClaimLost    also errors.Is(err, protocol.ErrClaimLost)
//	503 store_unavailable …       protocol.ErrUnavailable  so are no responders, a timeout,
//	                                              a closed connection
//	500 internal_error (or other) ErrInternal
//	a reply off the contract      ErrBadReply
//
// # Deadlines
//
// A context without a deadline gets one: WithTimeout (default 250 ms), or
// for Settle and ReleaseClaim WithSettleTimeout (default 1 s). No
// responders fails at once with protocol.ErrUnavailable, without retrying.
//
// A Client holds no goroutines or subscriptions; it is safe for concurrent
// use and needs no Close (the caller owns the connection).
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/protocol"
)

// Client calls the sluice micro service on one connection. Create it with
// New. Its methods are safe for concurrent use.
type Client struct {
	nc            *nats.Conn
	prefix        string
	timeout       time.Duration
	settleTimeout time.Duration
	subj          map[string]string // endpoint -> request subject (read only)
	events        protocol.Subjects
	tracer        trace.Tracer // nil: no client spans (WithTracer)
}

// newSubjects returns the request subject of every endpoint under prefix:
// with a tenant, the scoped ones (protocol.Scoped(): all but quota.reset).
func newSubjects(prefix, tenant string) map[string]string {
	subj := map[string]string{protocol.QuotaReset: protocol.Subject(prefix, protocol.QuotaReset)}
	for _, e := range protocol.Scoped() {
		subj[e] = protocol.Subject(prefix, e)
		if tenant != "" {
			subj[e] = protocol.ScopedSubject(prefix, protocol.TenantToken(tenant), e)
		}
	}
	return subj
}

// New returns a client of the sluice service reachable on nc. It does not
// touch the network: a service that is not running shows up as
// protocol.ErrUnavailable on the first call. A nil connection or a bad option is
// protocol.ErrInvalidOption.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", errInvalidOption)
	}
	o := options{
		prefix:        protocol.DefaultPrefix,
		timeout:       protocol.DefaultTimeout,
		settleTimeout: protocol.DefaultSettleTimeout,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.applyClient(&o); err != nil {
			return nil, err
		}
	}
	ev, err := protocol.NewSubjects(o.prefix)
	if err != nil { // cannot happen: WithPrefix validated it
		return nil, fmt.Errorf("%w: %w", errInvalidOption, err)
	}
	return &Client{
		nc:            nc,
		prefix:        o.prefix,
		timeout:       o.timeout,
		settleTimeout: max(o.settleTimeout, o.timeout),
		subj:          newSubjects(o.prefix, o.tenant),
		events:        ev,
		tracer:        o.tracer,
	}, nil
}

// Prefix is the subject prefix the client sends to ("sluice" by default).
func (c *Client) Prefix() string { return c.prefix }

// Timeout is the deadline of a call whose context has none (Settle and
// ReleaseClaim excepted: see SettleTimeout).
func (c *Client) Timeout() time.Duration { return c.timeout }

// SettleTimeout is the deadline of Settle, SettleTTL and ReleaseClaim when
// their context has none; never less than Timeout.
func (c *Client) SettleTimeout() time.Duration { return c.settleTimeout }

// maxReplyQuote bounds how much of an unreadable reply an error quotes.
const maxReplyQuote = 128

// call sends req as JSON to subject and decodes the reply into reply,
// under ctx or, when ctx has no deadline, under budget. It maps every
// failure to a sentinel (see errors.go).
func (c *Client) call(ctx context.Context, subject string, budget time.Duration, req, reply any) error {
	data, err := json.Marshal(req)
	if err != nil { // a NaN percent, for one: nothing the service could read
		return fmt.Errorf("%w: %s: encode request: %w", ErrInvalid, subject, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	rm := &nats.Msg{Subject: subject, Data: data}
	if c.tracer != nil {
		var span trace.Span
		ctx, span = c.tracer.Start(ctx, subject, trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		rm.Header = traceHeader(sc)
	}
	msg, err := c.nc.RequestMsgWithContext(ctx, rm)
	if err != nil {
		return requestError(subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, convErr := strconv.Atoi(code)
		if convErr != nil {
			n = 0 // not a status code at all: ErrInternal
		}
		return &ServiceError{Subject: subject, Code: n, Reason: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(msg.Data, reply); err != nil {
		return badReply(subject, msg.Data, err)
	}
	return nil
}

// traceHeader is the W3C trace context of sc as request headers:
// traceparent, and tracestate when sc has one (what tracing.Inject
// writes, without linking the propagation package).
func traceHeader(sc trace.SpanContext) nats.Header {
	flags := sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom)
	h := nats.Header{"traceparent": {"00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags.String()}}
	if ts := sc.TraceState().String(); ts != "" {
		h["tracestate"] = []string{ts}
	}
	return h
}

// requestError maps an error of the request itself (no reply was read).
func requestError(subject string, err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, subject, err)
	}
	// No responders (no service instance), the deadline, a cancelled ctx,
	// a closed or draining connection: the service cannot be reached.
	return fmt.Errorf("%w: %s: %w", errUnavailable, subject, err)
}

// badReply is the error of a reply that does not decode as the contract
// says.
func badReply(subject string, data []byte, cause error) error {
	q := data
	if len(q) > maxReplyQuote {
		q = q[:maxReplyQuote]
	}
	return fmt.Errorf("%w: %s: %q: %w", ErrBadReply, subject, q, cause)
}

// callOK calls an endpoint whose reply is {"ok":true}.
func (c *Client) callOK(ctx context.Context, subject string, budget time.Duration, req any) error {
	var rep protocol.OKReply
	if err := c.call(ctx, subject, budget, req, &rep); err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("%w: %s: reply is not {\"ok\":true}", ErrBadReply, subject)
	}
	return nil
}
