package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// PprofEnv names the environment variable that, when set to a host:port,
// serves net/http/pprof on its own listener (never on the edge's HTTP
// listener). Off by default; meant for profiling runs such as
// cmd/sluice-bench --profile:
//
//	SLUICE_PPROF_ADDR=127.0.0.1:6060 go run ./cmd/edge
//	go tool pprof 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10'
//
// It is not a configuration flag on purpose: it exposes process internals
// and is only for the operator at the machine.
const PprofEnv = "SLUICE_PPROF_ADDR"

func init() {
	addr := os.Getenv(PprofEnv)
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "edge: %s=%s: %v\n", PprofEnv, addr, err)
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// The listener lives as long as the process: it is bound before the app
	// starts (a bad address fails at once) and dies with the process.
	go func() { _ = srv.Serve(ln) }()
}
