package kvstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A create nats-server never answers (raced by another client's equal
// create) ends as soon as find sees what it was making: cancelled, and
// the attempt told to read again, well before Retry's 5 s attempt.
func TestCreateRacedEndsWhenFound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	created := make(chan struct{})
	var cancelled bool
	start := time.Now()
	finds := 0
	err := CreateRaced(ctx, func(ctx context.Context) error {
		close(created)
		<-ctx.Done() // no answer ever comes
		cancelled = true
		return ctx.Err()
	}, func(context.Context) error {
		if finds++; finds < 2 {
			return errors.New("not there yet")
		}
		return nil
	})
	<-created
	if !errors.Is(err, errRetryNow) {
		t.Fatalf("err = %v, want errRetryNow", err)
	}
	if !cancelled {
		t.Fatal("the unanswered create was not cancelled")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("ended after %v, want about two polls (%v each)", d, createPoll)
	}
}

// An answered create is its answer, found or not.
func TestCreateRacedAnswered(t *testing.T) {
	want := errors.New("refused")
	err := CreateRaced(context.Background(), func(context.Context) error { return want },
		func(context.Context) error { return errors.New("not there") })
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}
