package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"

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
		cur, err := js.Stream(ctx, sc.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			st, err = js.CreateStream(ctx, sc)
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
