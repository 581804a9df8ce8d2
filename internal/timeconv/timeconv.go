// Package timeconv converts durations to the whole units of sluice's wire
// formats and headers: milliseconds (retry_after_ms, reset_ms,
// expires_in_ms, ttl_ms) and seconds (Retry-After, RateLimit).
package timeconv

import "time"

// Ceil is d in whole units, rounded up, so that a positive duration never
// reads as 0; 0 for d <= 0.
func Ceil(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / unit)
	if d%unit != 0 {
		n++
	}
	return n
}

// CeilMs is d in whole milliseconds, rounded up (see Ceil).
func CeilMs(d time.Duration) int64 { return Ceil(d, time.Millisecond) }
