// Command floor-server is the floor of sluice-bench's edge row,
// a bare net/http handler doing what the edge must do at the least — read
// the body and make it durable with one JetStream publish (the edge's own
// HookStore: same subject, headers and Nats-Msg-Id) on an embedded
// nats-server configured like the edge's — and nothing else: no limits, no
// claims, no settle.
package main

import (
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
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
)

func main() { os.Exit(floorMain(os.Args[1:])) }

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
	if _, err := hooks.EnsureStream(sctx, js, hooks.StreamConfig{Prefix: protocol.DefaultPrefix}); err != nil {
		return err
	}
	store := hooks.NewShardedHookStore(js, protocol.DefaultPrefix, "HOOKS", 1)
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
		_, err = store.Store(pctx, hooks.Hook{
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
