package testkit_test

import (
	"testing"

	"github.com/sluice-dev/sluice/testkit"
)

// TestNewStopsWithTheTest: New (internal/jstest.Start, which kvstore's and
// natsembed's internal tests use too) hands back a server that answers
// JetStream, and the test's end closes the connection and shuts the server
// down.
func TestNewStopsWithTheTest(t *testing.T) {
	var k *testkit.Kit
	t.Run("inner", func(t *testing.T) {
		k = testkit.New(t)
		if _, err := k.JS.AccountInfo(t.Context()); err != nil {
			t.Fatalf("JetStream: %v", err)
		}
	})
	if k == nil {
		t.Fatal("inner test did not start a kit")
	}
	if !k.Conn.IsClosed() {
		t.Error("connection still open after the test")
	}
	if k.Server.NATS().Running() {
		t.Error("server still running after the test")
	}
}
