package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/sluice-dev/sluice/config"
)

// PprofEnv names the environment variable that, set to a loopback
// host:port, serves net/http/pprof on its own listener (for profiling runs
// such as cmd/sluice-bench --profile):
//
//	SLUICE_PPROF_ADDR=127.0.0.1:6060 go run ./cmd/edge
//	go tool pprof 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10'
//
// Not a flag on purpose: it exposes process internals to the operator at
// the machine only. A non-loopback address is refused, and
// /debug/pprof/cmdline is not served (it may hold --admin-token).
const PprofEnv = "SLUICE_PPROF_ADDR"

// startPprof serves pprof on the address getenv(PprofEnv) names, if any
// (bound: the listener's address), until the returned stop is called (Run
// calls it when it returns). It is bound before the app starts, so a bad
// address fails at once.
func startPprof(getenv func(string) string) (stop func(), bound string, err error) {
	addr := getenv(PprofEnv)
	if addr == "" {
		return func() {}, "", nil
	}
	ln, err := listenPprof(addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s=%s: %w", PprofEnv, addr, err)
	}
	srv := &http.Server{Handler: pprofMux(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		_ = srv.Close()
		<-done
	}, ln.Addr().String(), nil
}

// listenPprof binds addr, which must be a loopback address.
func listenPprof(addr string) (net.Listener, error) {
	if !config.IsLoopback(addr) {
		return nil, fmt.Errorf("pprof listens on loopback only (e.g. 127.0.0.1:6060), not %q", addr)
	}
	return net.Listen("tcp", addr)
}

// pprofMux serves the profiles, without /debug/pprof/cmdline.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
