package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPprofLoopbackOnly: a non-loopback pprof address is refused; on
// loopback the profiles are served but not the command line.
func TestPprofLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.0.0.1:6060"} {
		if ln, err := listenPprof(addr); err == nil || !strings.Contains(err.Error(), "loopback only") {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("%s: %v", addr, err)
		}
	}
	ln, err := listenPprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	mux := pprofMux()
	for path, want := range map[string]int{"/debug/pprof/cmdline": 404, "/debug/pprof/": 200, "/debug/pprof/heap": 200} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", path, rec.Code, want)
		}
	}
}

// TestPprofStartedByRun: Run starts pprof (not a package init, so tests and
// other subcommands never do): a bad address is exit code 2 before the app
// starts; a good one serves until Run's stop, which closes the listener.
func TestPprofStartedByRun(t *testing.T) {
	var stderr strings.Builder
	env := map[string]string{PprofEnv: "10.0.0.1:6060"}
	if code := run(context.Background(), []string{"--data-dir", t.TempDir()}, func(k string) string { return env[k] }, &stderr, nil); code != 2 || !strings.Contains(stderr.String(), PprofEnv) {
		t.Fatalf("bad pprof address: code %d, stderr %q", code, stderr.String())
	}
	stop, addr, err := startPprof(func(string) string { return "127.0.0.1:0" })
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	stop()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("pprof still listening after stop")
	}
	if stop, _, err := startPprof(func(string) string { return "" }); err != nil || stop == nil {
		t.Fatalf("unset: %v", err)
	}
}
