//go:build race

package faults

import "time"

// raceEnabled: the test binary is built with -race (CPU-heavy scenarios
// scale down).
const raceEnabled = true

// raceSlack is the extra timer lateness allowed under the race detector:
// with a whole-tree `go build -a` running beside the suite on two cores
// (the loaded CI check), a reserve answered from the fallback ended 77 ms
// after its 250 ms budget (TestServerStall); 100 ms keeps the bound far
// below a second budget.
const raceSlack = 100 * time.Millisecond
