//go:build race

package faults

import "time"

// raceEnabled: the test binary is built with -race (CPU-heavy scenarios
// scale down).
const raceEnabled = true

// raceSlack is the extra timer lateness allowed under the race detector.
const raceSlack = 50 * time.Millisecond
