// Command edge runs sluice: the HTTP webhook edge, the partition-owning quota
// worker and the `sluice` NATS micro service, on an embedded nats-server by
// default (or an existing NATS deployment with --nats-url).
//
//	go run ./cmd/edge            # 127.0.0.1:8080, embedded NATS on 127.0.0.1:4222, data in ./data
//	go run ./cmd/edge -h         # every flag, its environment twin and default
//	go run ./cmd/edge nats-authz --user acme-svc --role service --tenants acme
//	                             # the nats-server authorization of a role (external NATS)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/fx"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "nats-authz" {
		os.Exit(runNATSAuthz(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(Run(ctx, os.Args[1:], os.Getenv, os.Stderr))
}

// Run loads the configuration, starts the app, waits for ctx to end (a
// signal), stops the app and returns the exit code.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := config.Parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "edge:", err)
		return 2
	}
	log := sluicefx.NewLogger(cfg)
	app := fx.New(sluicefx.Options(cfg, log))
	if err := app.Err(); err != nil {
		log.Error("start-up failed", "error", err)
		return 1
	}
	startCtx, cancel := context.WithTimeout(ctx, app.StartTimeout())
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		log.Error("start-up failed", "error", err)
		stopCtx, c2 := context.WithTimeout(context.Background(), app.StopTimeout())
		defer c2()
		_ = app.Stop(stopCtx)
		return 1
	}
	<-ctx.Done()
	log.Info("shutting down")
	stopCtx, c3 := context.WithTimeout(context.Background(), app.StopTimeout())
	defer c3()
	if err := app.Stop(stopCtx); err != nil {
		log.Error("shutdown incomplete", "error", err)
		return 1
	}
	log.Info("stopped")
	return 0
}
