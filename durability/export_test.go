package durability

// ReadClusterEveryRound makes r read the cluster's servers and streams at
// every round.
func ReadClusterEveryRound(r *Rounds) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readAge = 0
}
