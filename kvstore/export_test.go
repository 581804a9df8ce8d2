package kvstore

// PendingAcks is how many writes of b await their acks.
func PendingAcks(b *Bucket) int {
	b.acks.mu.Lock()
	defer b.acks.mu.Unlock()
	return len(b.acks.pending)
}

// AckIDs is how many reply ids b's writes have used so far.
func AckIDs(b *Bucket) uint64 {
	b.acks.mu.Lock()
	defer b.acks.mu.Unlock()
	return b.acks.next
}

// HoldBatches keeps b's writes queued (as if its units in flight were
// all busy) until release, which sends the queue as batches. It reports
// false for a bucket whose writes do not travel in batches.
func HoldBatches(b *Bucket) (release func(), ok bool) {
	a := b.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.batched {
		return nil, false
	}
	a.flying += maxUnitsInFlight
	return func() {
		a.mu.Lock()
		a.flying -= maxUnitsInFlight
		a.mu.Unlock()
		a.flush()
	}, true
}

// Queued is how many writes of b wait in its queue.
func Queued(b *Bucket) int {
	b.acks.mu.Lock()
	defer b.acks.mu.Unlock()
	return len(b.acks.queue)
}

// Batches is how many batches b's writes have been sent in.
func Batches(b *Bucket) uint64 {
	b.acks.mu.Lock()
	defer b.acks.mu.Unlock()
	return b.acks.batches
}
