package testkit

import "github.com/sluice-dev/sluice/internal/jstest"

// LogBuffer is a log sink safe for concurrent writes (an app's goroutines
// log while the test reads); String returns everything written so far.
type LogBuffer = jstest.LogBuffer
