package testkit

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Msgs is the number of messages st holds now, failing the test when its
// info cannot be read within RequestTimeout.
func Msgs(t T, st jetstream.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	return state(ctx, t, st).Msgs
}

// StoredMsgs is every message st holds now in sequence order (a deleted
// sequence is passed over), failing the test on another read error or
// when the reads take longer than RequestTimeout.
func StoredMsgs(t T, st jetstream.Stream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	s := state(ctx, t, st)
	var out []*jetstream.RawStreamMsg
	for seq := s.FirstSeq; s.Msgs > 0 && seq <= s.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("testkit: stream message %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// state reads st's state, failing the test on an error.
func state(ctx context.Context, t T, st jetstream.Stream) jetstream.StreamState {
	t.Helper()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("testkit: stream info: %v", err)
	}
	return info.State
}
