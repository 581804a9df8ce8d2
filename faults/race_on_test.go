//go:build race

package faults

// raceEnabled: the test binary is built with -race (CPU-heavy scenarios
// scale down).
const raceEnabled = true
