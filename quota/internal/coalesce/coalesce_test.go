package coalesce

import (
	"testing"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// TestAnswerOfCopies: an Answer outlives the reply frame it came from (the
// frame's buffer is the subscription's, reused after the callback).
func TestAnswerOfCopies(t *testing.T) {
	b := frame.AppendReplyHeader(nil, false, "", 2)
	b = frame.AppendAnswer(b, &frame.Answer{Index: 0, Result: frame.ResultPending, HookID: "h1", RetryMs: 7, Revision: 3,
		Limits: []frame.Limit{{Remaining: 1, ResetMs: 2}}})
	b = frame.AppendAnswer(b, &frame.Answer{Index: 1, Status: frame.StatusNotOwner, Reason: protocol.NotOwner.Code})
	rf, err := frame.DecodeReply(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []Answer
	for range rf.Count {
		var a frame.ReplyAnswer
		if err := rf.Next(&a); err != nil {
			t.Fatal(err)
		}
		got = append(got, AnswerOf(&a))
	}
	clear(b)
	if a := got[0]; a.Status != frame.StatusAnswered || a.Result != frame.ResultPending || a.HookID != "h1" ||
		a.RetryMs != 7 || a.Revision != 3 || a.NLimits != 1 || a.Limits[0] != (frame.Limit{Remaining: 1, ResetMs: 2}) {
		t.Errorf("answer 0: %+v", a)
	}
	if a := got[1]; a.Status != frame.StatusNotOwner || a.Reason != protocol.NotOwner.Code {
		t.Errorf("answer 1: %+v", a)
	}
}
