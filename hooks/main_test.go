package hooks_test

import (
	"testing"

	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
