package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/testkit"
)

// accessLines are the access log's lines (msg "hook") of a stopped edge's
// JSON log.
func accessLines(t *testing.T, e *runningEdge) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(e.stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		if m["msg"] == "hook" {
			out = append(out, m)
		}
	}
	return out
}

// TestAccessLog: with --access-log a node logs one info line per answered
// hook — a 202, a 4xx and a duplicate — with its tenant, source, status,
// hook id, duration and node, in the --log-format's form; without it, none.
func TestAccessLog(t *testing.T) {
	post := func(t *testing.T, e *runningEdge, path, key string, want int) testkit.Response {
		t.Helper()
		r := testkit.HTTP(t, "POST", e.url+path, []byte(`{}`), map[string]string{"Content-Type": "application/json", "Idempotency-Key": key})
		if r.Code != want {
			t.Fatalf("POST %s: %d %s, want %d", path, r.Code, r.Body, want)
		}
		return r
	}
	host, _ := os.Hostname()
	t.Run("json", func(t *testing.T) {
		e := runEdge(t, t.TempDir(), true, "--access-log", "--log-level", "info", "--log-format", "json")
		first := post(t, e, "/v1/hooks/acme/orders", "k-1", 202)
		post(t, e, "/v1/hooks/acme/orders", "k-1", 200) // the duplicate
		post(t, e, "/v1/hooks/acme/a!b", "k-2", 400)    // invalid_source
		e.stop(t)
		got := accessLines(t, e)
		id := first.Header.Get("X-Hook-Id")
		want := []struct {
			source string
			status float64
			id     string
		}{{"orders", 202, id}, {"orders", 200, id}, {"a!b", 400, ""}}
		if len(got) != len(want) {
			t.Fatalf("%d access lines, want %d:\n%s", len(got), len(want), e.stderr.String())
		}
		for i, w := range want {
			g := got[i]
			if g["level"] != "INFO" || g["tenant"] != "acme" || g["source"] != w.source || g["status"] != w.status || g["id"] != w.id {
				t.Errorf("line %d: %v, want source %s status %v id %q", i, g, w.source, w.status, w.id)
			}
			if d, ok := g["duration_ms"].(float64); !ok || d < 0 {
				t.Errorf("line %d: duration_ms %v", i, g["duration_ms"])
			}
			if g["node"] != host {
				t.Errorf("line %d: node %v, want the host's name %q (a single node)", i, g["node"], host)
			}
			if _, ok := g["time"].(string); !ok || g["request_id"] == "" {
				t.Errorf("line %d: no time or request_id: %v", i, g)
			}
		}
	})
	t.Run("text", func(t *testing.T) {
		e := runEdge(t, t.TempDir(), true, "--access-log", "--log-level", "info")
		post(t, e, "/v1/hooks/acme/orders", "k-1", 202)
		e.stop(t)
		if n := strings.Count(e.stderr.String(), "level=INFO msg=hook node="); n != 1 {
			t.Fatalf("%d text access lines, want 1:\n%s", n, e.stderr.String())
		}
		if !strings.Contains(e.stderr.String(), " tenant=acme source=orders status=202 id=") {
			t.Fatalf("no access line for the 202:\n%s", e.stderr.String())
		}
	})
	t.Run("off by default", func(t *testing.T) {
		e := runEdge(t, t.TempDir(), true, "--log-level", "debug", "--log-format", "json")
		post(t, e, "/v1/hooks/acme/orders", "k-1", 202)
		post(t, e, "/v1/hooks/acme/a!b", "k-2", 400)
		e.stop(t)
		if got := accessLines(t, e); len(got) != 0 {
			t.Fatalf("access lines without --access-log: %v", got)
		}
	})
}
