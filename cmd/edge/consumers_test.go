package main

import (
	"strings"
	"testing"
)

// TestConsumersCLI: `edge consumers` creates, edits, lists, reads and
// deletes a tenant's managed consumer on a running node, and refuses bad
// names before any request.
func TestConsumersCLI(t *testing.T) {
	n := startAdminNode(t)
	cli := adminRunner(t, "edge consumers", runConsumers, map[string]string{envAdminURL: n.URL, envAdminToken: adminToken}, adminToken)
	if got := cli(0, "put", "acme", "gh-worker", "--sources", "gh", "--max-deliver", "5", "--ack-wait", "45s"); !strings.Contains(got, `"consumer": "acme~gh-worker"`) ||
		!strings.Contains(got, `"ack_wait_ms": 45000`) || !strings.Contains(got, `"deliver_subject": "sluice.redeliver.acme.consumer.gh-worker"`) {
		t.Fatalf("put: %s", got)
	}
	// With a backoff JetStream waits its first step for the first ack.
	if got := cli(0, "put", "acme", "gh-worker", "--sources", "gh", "--max-deliver", "7", "--backoff", "2s,10s"); !strings.Contains(got, `"max_deliver": 7`) || !strings.Contains(got, `"ack_wait_ms": 2000`) {
		t.Fatalf("edit: %s", got)
	}
	// An ack wait other than the backoff's first step is refused, naming
	// both (JetStream would replace it without a word), and nothing changed.
	if got := cli(1, "put", "acme", "gh-worker", "--max-deliver", "3", "--ack-wait", "2s", "--backoff", "1s,2s"); !strings.Contains(got, "ack_wait_ms 2000 with backoff_ms") {
		t.Fatalf("ack wait with a backoff: %s", got)
	}
	if got := cli(0, "get", "acme", "gh-worker"); !strings.Contains(got, `"max_deliver": 7`) {
		t.Fatalf("get after a refused put: %s", got)
	}
	if got := cli(0, "list", "acme"); !strings.Contains(got, `"name": "gh-worker"`) {
		t.Fatalf("list: %s", got)
	}
	if got := cli(0, "get", "acme", "gh-worker"); !strings.Contains(got, `"num_pending": 0`) {
		t.Fatalf("get: %s", got)
	}
	if got := cli(1, "put", "acme", "w", "--backoff", "1s"); !strings.Contains(got, "backoff_ms needs a max_deliver") {
		t.Fatalf("backoff without max-deliver: %s", got)
	}
	cli(2, "put", "acme", "a.b")
	cli(2, "get", "acme")
	cli(2, "put", "acme", "w", "--backoff", "soon")
	if got := cli(0, "dead", "acme", "gh-worker"); !strings.Contains(got, `"dead_letters": []`) {
		t.Fatalf("dead: %s", got)
	}
	if got := cli(1, "redrive", "acme", "gh-worker", "7"); !strings.Contains(got, "dead_letter_not_found") {
		t.Fatalf("redrive of no letter: %s", got)
	}
	cli(0, "purge", "acme", "gh-worker")
	cli(0, "rm", "acme", "gh-worker")
	if got := cli(1, "get", "acme", "gh-worker"); !strings.Contains(got, "consumer_not_found") {
		t.Fatalf("get after rm: %s", got)
	}
}
