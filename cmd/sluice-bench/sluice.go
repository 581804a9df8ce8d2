package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
)

// edgeConfigYAML keeps the edge from rate limiting the HTTP benchmark: every
// tenant gets 1e6 hooks/s and 1e12 bytes/s. (The quota rows carry their own
// limits in each charge; this only concerns POST /v1/hooks.)
const edgeConfigYAML = `allow_unknown: true
defaults:
  limits:
    hooks: {rate: 1000000, burst: 1000000}
    bytes: {rate: 1000000000000, burst: 1000000000000}
  source: {dedupe: auto, max_body_bytes: 1048576}
`

// edgeProc is a running cmd/edge.
type edgeProc struct {
	*child
	httpURL   string
	natsURL   string
	pprofAddr string // "" unless profiling
}

// startEdge runs bin with its own data dir, loopback HTTP and NATS ports, a
// high-limit config, and (pprofAddr != "") the opt-in pprof listener. It
// returns once /readyz answers 200.
func startEdge(ctx context.Context, bin, dir string, partitions int, pprof bool, extra ...string) (*edgeProc, error) {
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
	np, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfg, []byte(edgeConfigYAML), 0o600); err != nil {
		return nil, err
	}
	e := &edgeProc{
		httpURL: fmt.Sprintf("http://127.0.0.1:%d", hp),
		natsURL: fmt.Sprintf("nats://127.0.0.1:%d", np),
	}
	env := cleanEnv()
	if pprof {
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		e.pprofAddr = fmt.Sprintf("127.0.0.1:%d", pp)
		env = append(env, "SLUICE_PPROF_ADDR="+e.pprofAddr)
	}
	e.child, err = startChild("edge", bin, append([]string{
		"--config", cfg,
		"--data-dir", filepath.Join(dir, "data"),
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", hp),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", np),
		"--partitions", strconv.Itoa(partitions),
		"--log-level", "warn",
	}, extra...), env)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := e.waitHTTP(rctx, e.httpURL+"/readyz"); err != nil {
		e.stop(10 * time.Second)
		return nil, err
	}
	return e, nil
}

// cleanEnv is the bench's environment without SLUICE_* variables, so that
// nothing but the flags the bench passes configures the edge.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return env
}

// connectQuota opens a TCP connection to the edge's embedded NATS server and
// a quota Router for it (coalescing: the default client; off: one JSON
// request per hit) (budget: long enough that an overloaded 2-core
// machine slows the rows down instead of failing them).
func connectQuota(natsURL string, partitions int, coalescing bool) (*nats.Conn, *quota.Router, error) {
	nc, err := nats.Connect(natsURL, nats.Name("sluice-bench"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", natsURL, err)
	}
	c, err := quota.NewRouter(nc, quota.WithPrefix("sluice"), quota.WithPartitions(partitions), quota.WithBudget(2*time.Second), quota.WithCoalescing(coalescing))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

// waitPartitions hits one tenant of every partition until each answers:
// /readyz says the node serves, but leases are taken one by one.
func waitPartitions(ctx context.Context, c *quota.Router) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	p := c.Partitions()
	probes := make([]string, p)
	left := p
	for i := 0; left > 0; i++ {
		name := "probe-" + strconv.Itoa(i)
		if n := quota.Partition(name, p); probes[n] == "" {
			probes[n] = name
			left--
		}
	}
	for _, tenant := range probes {
		for {
			_, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: 1, CapacityUs: 1000}}})
			if err == nil {
				break
			}
			if !errors.Is(err, protocol.ErrUnavailable) || ctx.Err() != nil {
				return fmt.Errorf("partition of %q: %w", tenant, err)
			}
		}
	}
	return nil
}
