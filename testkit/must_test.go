package testkit_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
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

// TestNewInvalidOption: an option with a bad argument fails the test with
// an error of protocol.ErrInvalidOption, before any server starts.
func TestNewInvalidOption(t *testing.T) {
	s := testkit.NewStandalone()
	defer s.Close()
	for reason, o := range map[string]testkit.Option{"empty store dir": testkit.WithStoreDir(""), "no users": testkit.WithUsers()} {
		var msg any
		func() {
			defer func() { msg = recover() }()
			testkit.New(s, o)
		}()
		if want := "testkit: " + protocol.ErrInvalidOption.Error() + ": " + reason; fmt.Sprint(msg) != want {
			t.Errorf("New: Fatalf got %q, want %q", msg, want)
		}
	}
}
