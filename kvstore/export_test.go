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
