package claims

import "time"

// expiring is an entry of an expiryHeap.
type expiring interface {
	expiry() time.Time
	setIndex(i int)
}

// expiryHeap orders entries by expiry, soonest first (a container/heap
// Interface); each entry tracks its index for heap.Remove and heap.Fix.
type expiryHeap[E expiring] []E

func (h expiryHeap[E]) Len() int           { return len(h) }
func (h expiryHeap[E]) Less(i, j int) bool { return h[i].expiry().Before(h[j].expiry()) }
func (h expiryHeap[E]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setIndex(i)
	h[j].setIndex(j)
}

func (h *expiryHeap[E]) Push(x any) {
	e := x.(E)
	e.setIndex(len(*h))
	*h = append(*h, e)
}

func (h *expiryHeap[E]) Pop() any {
	old := *h
	e := old[len(old)-1]
	var zero E
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	e.setIndex(-1)
	return e
}
