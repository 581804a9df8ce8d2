// Package millis converts durations to the whole milliseconds of sluice's
// wire formats (retry_after_ms, reset_ms, expires_in_ms, ttl_ms).
package millis

import "time"

// Ceil is d in whole milliseconds, rounded up, so that a positive duration
// never reads as 0 ms; 0 for d <= 0.
func Ceil(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}
