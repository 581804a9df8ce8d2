package main

import (
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
