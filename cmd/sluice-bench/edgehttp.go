package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sluice-dev/sluice/edge"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
)

// hookBody is the 1 KiB JSON body of every benchmark webhook.
var hookBody = func() []byte {
	const size = 1024
	head, tail := []byte(`{"event":"bench","pad":"`), []byte(`"}`)
	b := append([]byte{}, head...)
	b = append(b, bytes.Repeat([]byte("x"), size-len(head)-len(tail))...)
	return append(b, tail...)
}()

// httpClient is the load generator's client: keep-alive connections, one
// per request in flight.
func httpClient(inflight int) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        2 * inflight,
			MaxIdleConnsPerHost: 2 * inflight,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
}

// hookOp POSTs one webhook with a unique Idempotency-Key to base.
func hookOp(client *http.Client, base string, tenants int, keyPrefix string, errs *firstError) opFunc {
	names := tenantNames(tenants)
	urls := make([]string, len(names))
	for i, n := range names {
		urls[i] = base + "/v1/hooks/" + n + "/bench"
	}
	return func(ctx context.Context, seq uint64) outcome {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[seq%uint64(len(urls))], bytes.NewReader(hookBody))
		if err != nil {
			errs.set(err)
			return outError
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", keyPrefix+strconv.FormatUint(seq, 36))
		res, err := client.Do(req)
		if err != nil {
			errs.set(err)
			return outError
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusAccepted:
			return outOK
		case http.StatusOK:
			return outDuplicate
		case http.StatusConflict:
			return outPending
		case http.StatusTooManyRequests:
			return outLimited
		}
		errs.set(fmt.Errorf("POST %s: %s", req.URL.Path, res.Status))
		return outError
	}
}

// floorMain is `sluice-bench floor-server`: the floor of the edge benchmark,
// a bare net/http handler doing what the edge must do at the least — read
// the body and make it durable with one JetStream publish (the edge's own
// HookStore: same subject, headers and Nats-Msg-Id) on an embedded
// nats-server configured like the edge's — and nothing else: no limits, no
// claims, no settle.
func floorMain(args []string) int {
	fs := flag.NewFlagSet("floor-server", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "JetStream storage directory (required)")
	addr := fs.String("http-addr", "127.0.0.1:0", "HTTP listener")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "floor-server: --data-dir is required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runFloor(ctx, *dataDir, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "floor-server:", err)
		return 1
	}
	return 0
}

func runFloor(ctx context.Context, dataDir, addr string) error {
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: filepath.Join(dataDir, "jetstream"), Listen: "off"})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := kvstore.WaitReady(sctx, js); err != nil {
		return err
	}
	if _, err := edge.EnsureStream(sctx, js, edge.StreamConfig{Prefix: kvstore.DefaultPrefix}); err != nil {
		return err
	}
	store := edge.NewHookStore(js, kvstore.DefaultPrefix, "HOOKS")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /v1/hooks/{tenant}/{source}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := nuid.Next()
		pctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		_, err = store.Store(pctx, edge.Hook{
			ID: id, Tenant: r.PathValue("tenant"), Source: r.PathValue("source"),
			DedupeKey: r.Header.Get("Idempotency-Key"), ReceivedAt: time.Now(),
			ContentType: r.Header.Get("Content-Type"), Body: body,
		})
		cancel()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "accepted", "id": id})
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shctx, c2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer c2()
	if err := hs.Shutdown(shctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startFloor runs `<self> floor-server` on a free port.
func startFloor(ctx context.Context, dir string) (*child, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c, err := startChild("floor-server", self, []string{"floor-server", "--data-dir", dir, "--http-addr", addr}, cleanEnv())
	if err != nil {
		return nil, "", err
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.waitHTTP(rctx, "http://"+addr+"/readyz"); err != nil {
		c.stop(5 * time.Second)
		return nil, "", err
	}
	return c, "http://" + addr, nil
}
