package kvstore

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestCode10164AgainstNatsGo pins how sluice reads JetStream error 10164
// ("wrong last sequence", JSErrCodeStreamWrongLastSequenceConstant) next to
// nats.go's own mapping of it.
//
// nats.go reads 10164 as a CAS conflict, like 10071: its KeyValue wraps both
// in ErrKeyRevisionMismatch (jetstream/kv.go mapRevisionMismatch), and its
// ErrKeyExists matches 10071 only. sluice reads it otherwise, and on
// purpose: a replicated stream's leader also answers 10164, with nothing
// stored, to a revision-checked write that arrives while an earlier write
// to the key is proposed but not yet applied. That earlier write may be the
// caller's own, already acked (a settle sent right after its claim's ack),
// so 10164 is not yet a decision: keyBusy sees it, whileKeyBusy sends the
// write again (keyBusyRetries), and only a refusal that outlasts the
// retries is a conflict (MapError: ErrWrongLastSequence, never ErrExists,
// which would tell a claim create that somebody else holds the key).
func TestCode10164AgainstNatsGo(t *testing.T) {
	if jetstream.JSErrCodeStreamWrongLastSequenceConstant != codeWrongLastSeqConstant ||
		jetstream.JSErrCodeStreamWrongLastSequence != codeWrongLastSeq {
		t.Fatalf("nats.go's codes %d, %d; sluice's %d, %d", jetstream.JSErrCodeStreamWrongLastSequenceConstant,
			jetstream.JSErrCodeStreamWrongLastSequence, codeWrongLastSeqConstant, codeWrongLastSeq)
	}
	busy := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	conflict := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 7"}

	// nats.go: 10164 is not "key exists"; 10071 is.
	if errors.Is(busy, jetstream.ErrKeyExists) {
		t.Error("nats.go now reads 10164 as ErrKeyExists: revisit keyBusy and MapError")
	}
	if !errors.Is(conflict, jetstream.ErrKeyExists) {
		t.Error("nats.go no longer reads 10071 as ErrKeyExists")
	}

	// sluice: 10164 is busy (sent again), 10071 is decided.
	if !keyBusy(busy) {
		t.Error("keyBusy(10164) = false: a write refused undecided would be reported as a conflict at once")
	}
	if keyBusy(conflict) {
		t.Error("keyBusy(10071) = true: a real conflict would be retried")
	}
	// Past the retries, both are a revision conflict, never "exists".
	for _, err := range []error{busy, conflict} {
		got := MapError(err)
		if !errors.Is(got, ErrWrongLastSequence) || errors.Is(got, ErrExists) {
			t.Errorf("MapError(%d) = %v, want ErrWrongLastSequence and not ErrExists", err.(*jetstream.APIError).ErrorCode, got)
		}
	}
}
