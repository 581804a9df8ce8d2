package fx

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	uberfx "go.uber.org/fx"
)

// storageExitCode is the exit status of a process whose embedded
// JetStream cannot write again without a restart (see WatchStorage).
const storageExitCode = 3

// storageCheckEvery is how often WatchStorage looks.
const storageCheckEvery = time.Second

// storageReadyErr is the readiness of the embedded server's storage: nil,
// or why JetStream cannot write (natsembed.Server.StorageFailure). With
// --nats-url the external server's storage is its own business: nil.
func storageReadyErr(n *NATS) error {
	if n.Group != nil {
		if err := n.Group.Err(); err != nil {
			return err
		}
	}
	if n.Server == nil {
		return nil
	}
	return n.Server.StorageFailure()
}

// WatchStorage keeps the embedded server's storage in view: from the first
// critical write error on, sluice_jetstream_storage_ok is 0 and /readyz
// unready. The server cannot write again in this process, so once the
// filesystem has room again (at least 1 MiB, or 1/16 of the store up to
// 64 MiB) sluice says so and exits with status 3 for a supervisor to
// restart it: never ready and answering 503 forever, nor restarting into a
// full disk.
func WatchStorage(lc uberfx.Lifecycle, n *NATS, reg *Registry, sd uberfx.Shutdowner, log *slog.Logger) {
	if n.Server == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_jetstream_storage_ok",
		Help: "1 while the embedded JetStream can write, 0 after a critical write error (a full disk) until the process restarts.",
	}, func() float64 {
		if storageReadyErr(n) != nil {
			return 0
		}
		return 1
	}))
	need := max(1<<20, min(64<<20, n.Server.MaxStore()/16))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	lc.Append(uberfx.Hook{
		OnStart: func(context.Context) error {
			wg.Go(func() {
				t := time.NewTicker(storageCheckEvery)
				defer t.Stop()
				warned := false
				for {
					select {
					case <-stop:
						return
					case <-t.C:
					}
					err := storageReadyErr(n)
					if err == nil {
						continue
					}
					free, ferr := n.Server.FreeBytes()
					if ferr != nil || free < need {
						if !warned {
							log.Error("JetStream cannot write (unready); waiting for space on the data dir", "error", err, "free_bytes", free, "need_bytes", need)
							warned = true
						}
						continue
					}
					log.Error("JetStream cannot write, and the data dir has room again: the embedded server recovers only by a restart; exiting for the supervisor to restart sluice",
						"error", err, "free_bytes", free, "exit_code", storageExitCode)
					_ = sd.Shutdown(uberfx.ExitCode(storageExitCode))
					return
				}
			})
			return nil
		},
		OnStop: func(context.Context) error {
			close(stop)
			wg.Wait()
			return nil
		},
	})
}
