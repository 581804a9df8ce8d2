//go:build unix

package fx_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
)

// BenchmarkEdgeHooks posts 1 KiB hooks with unique dedupe keys to a whole
// node (embedded server in this process) from 32 clients, and reports the
// process CPU per hook (user + system: the edge, the owner and the server
// together). Profile it to split a hook's CPU by stage:
//
//	go test -run '^$' -bench EdgeHooks -benchtime 5000x -cpuprofile cpu.out ./fx/
func BenchmarkEdgeHooks(b *testing.B) {
	dir := b.TempDir()
	h, _, err := startErr(b, "--data-dir", filepath.Join(dir, "data"), "--nats-listen", "off", "--config", benchConfig(b, dir))
	if err != nil {
		b.Fatal(err)
	}
	benchHooks(b, h, nil)
}

// BenchmarkLeafModeHooks is BenchmarkEdgeHooks against a leaf (--hub-url)
// whose hub runs in this process too: a hook's CPU includes its store in
// the outbox, its forwarding and its store in the hub's HOOKS (the
// benchmark waits until the outbox is empty).
//
//	go test -run '^$' -bench 'EdgeHooks|LeafModeHooks' -benchtime 10000x -count 4 ./fx/
func BenchmarkLeafModeHooks(b *testing.B) {
	dir := b.TempDir()
	leaf := testkit.FreeAddr(b)
	startNode(b, "--data-dir", filepath.Join(dir, "hub"), "--leaf-listen", leaf, "--config", benchConfig(b, dir))
	ed := startNode(b, "--data-dir", filepath.Join(dir, "edge"), "--hub-url", "nats-leaf://"+leaf, "--leaf-name", "e1",
		"--config", benchConfig(b, dir))
	testkit.Eventually(b, 10*time.Second, ed.n.Server.LeafConnected, "edge linked")
	benchHooks(b, ed.h, func() {
		testkit.Eventually(b, 5*time.Minute, func() bool { return ed.fw.Forwarder.Status().Backlog == 0 }, "outbox drained")
	})
}

// benchConfig writes a configuration whose limits never deny and returns
// its path.
func benchConfig(b *testing.B, dir string) string {
	cfgPath := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte("defaults:\n  limits:\n    hooks: {rate: 10000000, burst: 10000000}\n"+
		"    bytes: {rate: 100000000000, burst: 100000000000}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfgPath
}

// benchHooks posts b.N hooks to h from 32 clients, runs settle (nil: none)
// before it measures the process CPU, and reports it per hook.
func benchHooks(b *testing.B, h *sluicefx.HTTP, settle func()) {
	url := "http://" + *h.Addr.Load() + "/v1/hooks/acme/src"
	body := bytes.Repeat([]byte("x"), 1024)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	var unavailable atomic.Int64
	cpu0 := testkit.CPUTime(b)
	testkit.InFlight(b, 32, func(i int) error {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", prefix+strconv.Itoa(i))
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		// Read to the end: a body closed unread closes its connection, and
		// every hook would pay a TCP connect and accept (as sluice-bench's
		// edge row, which drains, does not).
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable {
			unavailable.Add(1) // a store timeout on a busy machine
			return nil
		}
		if res.StatusCode != http.StatusAccepted {
			return fmt.Errorf("hook %d: status %d", i, res.StatusCode)
		}
		return nil
	})
	if settle != nil {
		settle()
	}
	b.ReportMetric(float64((testkit.CPUTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/hook")
	b.ReportMetric(float64(unavailable.Load()), "503s")
}
