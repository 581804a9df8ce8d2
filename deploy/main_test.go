package deploy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain: the nodes the tests start leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
