package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream creates the stream sc or brings an existing one to sc,
// retrying while JetStream is not ready. An existing stream keeps its
// placement and is updated only when it lacks some setting of sc:
// nats-server rewrites meta.inf on every update, and a power cut before the
// next sync can leave it empty (the stream gone at the next start).
func EnsureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := Retry(ctx, func(ctx context.Context) error {
		cur, err := readStream(ctx, js, sc.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			err = CreateRaced(ctx, func(ctx context.Context) (err error) {
				st, err = js.CreateStream(ctx, sc)
				return err
			}, findStream(js, sc.Name))
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return errRetryNow // another node created it meanwhile
			}
			return err
		case err != nil:
			return err
		}
		have := cur.CachedInfo().Config
		want := sc
		want.Placement = have.Placement // placed when created
		if Covers(have, want) {
			st = cur
			return nil
		}
		st, err = js.UpdateStream(ctx, want)
		return err
	})
	return st, err
}

// createPoll is how often CreateRaced looks for what it is creating.
const createPoll = 200 * time.Millisecond

// CreateRaced runs create, the creation of a stream or a consumer, inside
// an attempt of Retry, and when find (a read of what create makes)
// succeeds before create has an answer, cancels create and returns an
// error that Retry retries at once (the attempt then reads what is
// there). nats-server never answers a create raced by an equal create of
// another client (nodes starting together): the second assignment,
// applied after the first, counts as answered (jetstream_cluster.go
// processStreamAssignment and processConsumerAssignment, markResponded),
// and the call would wait its whole attempt out (5 s) for nothing.
func CreateRaced(ctx context.Context, create, find func(context.Context) error) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- create(cctx) }()
	tick := time.NewTicker(createPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		fctx, fcancel := context.WithTimeout(cctx, createPoll)
		err := find(fctx)
		fcancel()
		if err == nil {
			cancel()
			<-done // whatever it says, the attempt reads again
			return errRetryNow
		}
	}
}

// readTimeout bounds a read of a stream at start (EnsureStream,
// EnsureBucket): while the first leader of a stream is being elected,
// nats-server answers no request for its info (the followers stay silent,
// jetstream_api.go jsStreamInfoRequest), and a read nobody answers is asked
// again rather than waited out for the rest of Retry's 5 s attempt.
const readTimeout = time.Second

// readStream reads stream name, returning an error Retry retries at once
// when no answer came within readTimeout.
func readStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	st, err := js.Stream(rctx, name)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		return nil, errRetryNow
	}
	return st, err
}

// findStream is CreateRaced's find for stream name.
func findStream(js jetstream.JetStream, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := js.Stream(ctx, name)
		return err
	}
}

// Covers reports whether the stream configuration have (as the server
// reports it) already holds every setting want states: each field want
// sets, or that has no "unset" form, is equal in have; a limit of 0 in
// want means unlimited, which the server reports as -1, and 0 replicas
// means 1.
func Covers(have, want jetstream.StreamConfig) bool {
	for _, l := range []*int64{&want.MaxMsgs, &want.MaxBytes, &want.MaxMsgsPerSubject} {
		if *l == 0 {
			*l = -1
		}
	}
	if want.MaxConsumers == 0 {
		want.MaxConsumers = -1
	}
	if want.MaxMsgSize == 0 {
		want.MaxMsgSize = -1
	}
	if want.Replicas == 0 {
		want.Replicas = 1
	}
	w, err := asFields(want)
	if err != nil {
		return false
	}
	h, err := asFields(have)
	if err != nil {
		return false
	}
	for k, v := range w {
		if !reflect.DeepEqual(v, h[k]) {
			return false
		}
	}
	return true
}

// asFields is c's JSON form as a map: the fields it states (an omitempty
// field left unset is absent).
func asFields(c jetstream.StreamConfig) (map[string]any, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}
