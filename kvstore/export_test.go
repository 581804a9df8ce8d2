package kvstore

// PendingAcks is how many writes of b await their acks.
func PendingAcks(b *Bucket) int {
	b.acks.mu.Lock()
	defer b.acks.mu.Unlock()
	return len(b.acks.pending)
}
