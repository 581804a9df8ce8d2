package testkit_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/testkit"
)

func TestMust(t *testing.T) {
	if got := testkit.Must(42, nil)(t); got != 42 {
		t.Fatalf("Must(42, nil) = %d", got)
	}

	s := testkit.NewStandalone() // its Fatalf panics with the message
	defer s.Close()
	var msg any
	func() {
		defer func() { msg = recover() }()
		testkit.Must(0, errors.New("no bucket"))(s)
	}()
	if fmt.Sprint(msg) != "no bucket" {
		t.Fatalf("Must on an error: Fatalf got %q, want %q", msg, "no bucket")
	}
}
