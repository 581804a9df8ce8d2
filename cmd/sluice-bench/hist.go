package main

import (
	"math"
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram in the spirit of HdrHistogram:
// values below 2^subBits ns are exact; above, every power of two is split
// into 2^subBits equal buckets, so a recorded value is known to within
// 1/2^subBits (0.8 %) of itself. It is not safe for concurrent use: each
// load goroutine keeps its own and they are merged at the end.
type hist struct {
	counts [histBuckets]uint64
	total  uint64
	max    uint64
}

const (
	subBits     = 7
	subCount    = 1 << subBits
	histBuckets = subCount + (64-subBits)*subCount
)

// bucketOf returns the bucket index of v (ns).
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // v>>e is in [subCount, 2*subCount)
	return subCount + e*subCount + int(v>>uint(e)) - subCount
}

// bucketHigh returns the largest value that falls in bucket i.
func bucketHigh(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	e := (i - subCount) / subCount
	m := uint64((i-subCount)%subCount + subCount)
	hi := (m+1)<<uint(e) - 1
	if hi < m<<uint(e) { // overflow of the last bucket
		return math.MaxUint64
	}
	return hi
}

// record adds one observation of d (negative counts as 0).
func (h *hist) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.total++
	h.max = max(h.max, v)
}

// merge adds o's observations to h.
func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the value at quantile q (0 < q <= 1): the highest value
// equivalent to the bucket holding the ceil(q*total)-th smallest
// observation, never more than the largest observation. 0 when empty.
func (h *hist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max))
		}
	}
	return time.Duration(h.max)
}
