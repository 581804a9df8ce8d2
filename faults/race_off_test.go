//go:build !race

package faults

import "time"

const raceEnabled = false

// raceSlack is the extra timer lateness allowed under the race detector.
const raceSlack = 0 * time.Millisecond
