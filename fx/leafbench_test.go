//go:build unix

package fx_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// BenchmarkLeafDrain measures a leaf draining a backlog of b.N hooks
// (1 KiB, unique hook ids and dedupe keys: each hook's claim is written
// into the hub's bucket as it is forwarded) into its hub after an outage: the hooks are
// written into the outbox while the hub is stopped (as the edge's HookStore
// writes them), then the hub starts; it reports the time from the hub's
// start to the leaf link, from the link to an empty outbox, and the
// forwarding rate (hooks/s). Hub and edge run in this process.
//
//	go test -run '^$' -bench LeafDrain -benchtime 100000x ./fx/
func BenchmarkLeafDrain(b *testing.B) {
	dir := b.TempDir()
	leaf := testkit.FreeAddr(b)
	hubArgs := []string{"--data-dir", filepath.Join(dir, "hub"), "--leaf-listen", leaf}
	edgeArgs := []string{"--data-dir", filepath.Join(dir, "edge"), "--hub-url", "nats-leaf://" + leaf, "--leaf-name", "e1"}
	hub := startNode(b, hubArgs...)
	hub.stop() // the hub's HOOKS exists; now the outage
	ed := startNode(b, edgeArgs...)
	ctx := context.Background()
	js, err := jetstream.New(ed.n.Conn, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	for i := range b.N {
		m := nats.NewMsg(hooks.OutboxSubject("sluice", protocol.HookSubject("sluice", "t"+strconv.Itoa(i%100), "src")))
		m.Data = body
		id := prefix + strconv.Itoa(i)
		m.Header.Set(hooks.HeaderHookID, id)
		m.Header.Set(hooks.HeaderTenant, "t"+strconv.Itoa(i%100))
		m.Header.Set(hooks.HeaderSource, "src")
		m.Header.Set(hooks.HeaderDedupeKey, id) // its claim is written into the hub's bucket too
		m.Header.Set(hooks.HeaderReceivedAt, time.Now().UTC().Format(time.RFC3339Nano))
		if _, err := js.PublishMsgAsync(m, jetstream.WithMsgID(id)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("backlog not written")
	}
	outbox, err := js.Stream(ctx, hooks.OutboxStream("HOOKS"))
	if err != nil {
		b.Fatal(err)
	}
	backlog := func() uint64 {
		info, err := outbox.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return info.State.Msgs
	}
	if n := backlog(); n != uint64(b.N) {
		b.Fatalf("backlog %d, want %d", n, b.N)
	}
	cpu0 := testkit.CPUTime(b)
	b.ResetTimer()
	t0 := time.Now()
	hub = startNode(b, hubArgs...)
	for !ed.n.Server.LeafConnected() {
		time.Sleep(time.Millisecond)
	}
	linked := time.Now()
	for backlog() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	drained := time.Since(linked)
	b.StopTimer()
	b.ReportMetric(linked.Sub(t0).Seconds(), "s-to-link")
	b.ReportMetric(drained.Seconds(), "s-link-to-empty")
	b.ReportMetric(float64(b.N)/drained.Seconds(), "hooks/s")
	b.ReportMetric(float64((testkit.CPUTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/hook")
	if got := len(hubHooks(b, hub.n.JS)); got != b.N {
		b.Fatalf("hub holds %d hooks, want %d", got, b.N)
	}
}
