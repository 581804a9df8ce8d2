//go:build !unix

package testkit

import (
	"testing"
	"time"
)

// CPUTime is 0 where getrusage is missing: no CPU figure is reported.
func CPUTime(testing.TB) time.Duration { return 0 }
