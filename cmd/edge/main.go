// Command edge runs sluice: the HTTP webhook edge, the partition-owning quota
// worker and the `sluice` NATS micro service, on an embedded nats-server by
// default (or an existing NATS deployment with --nats-url).
//
//	go run ./cmd/edge            # 127.0.0.1:8080, embedded NATS on 127.0.0.1:4222, data in ./data
//	go run ./cmd/edge -h         # every flag, its environment twin and default
//	go run ./cmd/edge nats-authz --user acme-svc --role service --tenants acme
//	                             # the nats-server authorization of a role (external NATS)
//	go run ./cmd/edge tenants list  # tenants and sources through the admin API (see tenants.go)
//	go run ./cmd/edge --version  # module version and VCS revision of the build
//
// SIGHUP re-reads the --config file and the --secrets-key-file keys (see
// reload).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/durability"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/tenants"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "nats-authz" {
		os.Exit(runNATSAuthz(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "tenants" {
		os.Exit(runTenants(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "consumers" {
		os.Exit(runConsumers(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "healthcheck" {
		os.Exit(runHealthcheck(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && isVersionArg(os.Args[1]) {
		os.Exit(printVersion(os.Stdout))
	}
	os.Exit(Run(ctx, os.Args[1:], os.Getenv, os.Stderr))
}

// Run loads the configuration, starts the app, reloads the configuration
// on SIGHUP, waits for ctx to end (a signal), stops the app and returns the
// exit code. It logs to stderr.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	// Caught from the start: a SIGHUP while starting must not kill the
	// process (its default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return run(ctx, args, getenv, stderr, hup)
}

// run is Run with the reload signal as a channel.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, hup <-chan os.Signal) int {
	cfg, err := config.Parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		printCommands(stderr)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "edge:", err)
		return 2
	}
	stopPprof, _, err := startPprof(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "edge:", err)
		return 2
	}
	defer stopPprof()
	log := sluicefx.NewLoggerTo(cfg, stderr)
	// A start that fails leaves no data dir of its own behind: the
	// directories it creates are removed again (failedStart).
	created := ""
	if cfg.NATSURL == "" {
		created = firstMissing(cfg.DataDir)
	}
	var stores *sluicefx.Stores
	starting := startingLog(cfg, log)
	defer starting()
	app := fx.New(sluicefx.Options(ctx, cfg, log), fx.Populate(&stores))
	if err := app.Err(); err != nil {
		starting()
		// The constructor's own error, not fx's wiring around it: the cause
		// is the last line.
		log.Error("start-up failed", "error", dig.RootCause(err))
		var loss *durability.DataLossError
		if errors.As(err, &loss) {
			// The last line says what is missing and how to proceed.
			fmt.Fprintln(stderr, "edge:", loss)
		}
		failedStart(cfg.DataDir, created, log)
		return 1
	}
	startCtx, cancel := context.WithTimeout(ctx, app.StartTimeout())
	defer cancel()
	err = app.Start(startCtx)
	starting()
	if err != nil {
		log.Error("start-up failed", "error", dig.RootCause(err))
		stopCtx, c2 := context.WithTimeout(context.Background(), app.StopTimeout())
		defer c2()
		_ = app.Stop(stopCtx)
		failedStart(cfg.DataDir, created, log)
		return 1
	}
	code := 0
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case sig := <-app.Wait():
			// The app asked to stop (fx.Shutdowner), e.g. storage that only a
			// restart recovers: its exit code goes to the supervisor.
			code = sig.ExitCode
			done = true
		case <-hup:
			reload(args, getenv, stores, log)
		}
	}
	log.Info("shutting down", "exit_code", code)
	stopCtx, c3 := context.WithTimeout(context.Background(), app.StopTimeout())
	defer c3()
	if err := app.Stop(stopCtx); err != nil {
		log.Error("shutdown incomplete", "error", err)
		if code != 0 {
			// The app asked for this exit (storage that only a restart
			// recovers): its stop cannot finish the writes it would make
			// (lease releases on a full disk), but the supervisor must still
			// see the code that says why.
			return code
		}
		return 1
	}
	log.Info("stopped")
	return code
}

// startingEvery is how often a start-up still under way says so.
const startingEvery = 15 * time.Second

// startingLog says every startingEvery that the start-up is still under
// way, until the returned func is called (more than once is fine): a node
// of a cluster waits for its peers (up to sluicefx.StartWait), and a new
// cluster forms only once every one of its nodes runs.
func startingLog(cfg *config.Config, log *slog.Logger) func() {
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	began := time.Now()
	wg.Go(func() {
		t := time.NewTicker(startingEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			waited := time.Since(began).Round(time.Second)
			if cfg.NATSURL == "" && cfg.Clustered() {
				log.Warn("still starting: waiting for the cluster (a new cluster forms once every node of --routes runs)",
					"waited", waited, "gives_up_after", sluicefx.StartWait(cfg))
				continue
			}
			log.Warn("still starting", "waited", waited)
		}
	})
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// reload re-reads the configuration into the running node (SIGHUP),
// logging what changed: the file's tenants, sources and defaults, and the
// keys of --secrets-key-file. A configuration that does not load changes
// nothing; a key file that does not load keeps the running keys.
func reload(args []string, getenv func(string) string, st *sluicefx.Stores, log *slog.Logger) {
	cfg, err := config.Parse(args, getenv, nil)
	if err != nil {
		log.Error("reload failed: keeping the running configuration", "error", err)
		return
	}
	applied, restart := cfg.Changes(st.Policy.Config())
	wasOpen := st.Policy.OpenToUnknown()
	st.Policy.Reload(cfg)
	switch open := st.Policy.OpenToUnknown(); {
	case open && !wasOpen:
		log.Warn("reload: the file says allow_unknown: true: tenants nobody listed are accepted now, with the defaults")
	case !open && cfg.OpenQuickstart:
		// Why the quickstart stays closed: tenant records (the admin API),
		// or a file that listed tenants before (Policy.Closed).
		why := "tenants were listed in --config before"
		if st.Tenants != nil && st.Tenants.Closed() {
			why = "tenant records exist or existed (admin API)"
		}
		log.Info("reload: no tenants in --config, but " + why + ": unknown tenants still get 404 unknown_source (allow_unknown: true opens them)")
	}
	if len(applied) == 0 {
		log.Info("configuration reloaded: no change to tenants, sources or defaults")
	} else {
		log.Info("configuration reloaded", "changes", applied)
	}
	if len(restart) > 0 {
		log.Warn("reload: these settings changed but take effect on restart only", "settings", restart)
	}
	if cfg.SecretsKeyFile != "" {
		keys, err := tenants.LoadKeyring(cfg.SecretsKeyFile)
		if err != nil {
			log.Error("reload: keeping the running secrets keys", "error", err)
			return
		}
		st.Tenants.ReloadKeys(keys)
	}
}

// firstMissing returns the outermost directory of dir's path that does
// not exist yet (dir itself, or an ancestor MkdirAll would create), or ""
// when dir exists (or cannot be checked).
func firstMissing(dir string) string {
	p, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	top := ""
	for {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return top
		}
		top = p
		parent := filepath.Dir(p)
		if parent == p {
			return top
		}
		p = parent
	}
}

// failedStart removes what a failed start created of the data dir: dir,
// if created (firstMissing before the start) is dir or one of its
// ancestors, and the then empty directories up to created. It removes dir
// only while holding its lock, so never a directory another process has
// started on in the meantime.
func failedStart(dir, created string, log *slog.Logger) {
	if created == "" {
		return
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	if _, err := os.Lstat(abs); err == nil {
		unlock, err := natsembed.LockDir(abs)
		if err != nil {
			log.Warn("start-up failed: keeping the data dir it created", "data_dir", dir, "error", err)
			return
		}
		err = os.RemoveAll(abs)
		unlock()
		if err != nil {
			log.Warn("start-up failed: could not remove the data dir it created", "data_dir", dir, "error", err)
			return
		}
	}
	for p := filepath.Dir(abs); len(p) >= len(created) && p != filepath.Dir(p); p = filepath.Dir(p) {
		if os.Remove(p) != nil { // not empty, or not ours
			return
		}
	}
}
