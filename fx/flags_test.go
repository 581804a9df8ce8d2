package fx_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	uberfx "go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
)

// --durability sync-always reaches the embedded server: its JetStream
// fsyncs every write before acking it; at the default (synced, the single
// node's group sync) it does not.
func TestSyncAlwaysReachesServer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want bool
	}{{[]string{"--durability", "sync-always"}, true}, {nil, false}} {
		_, n, _ := start(t, append([]string{"--data-dir", t.TempDir(), "--nats-listen", "off"}, c.args...)...)
		if got := n.Server.NATS().JetStreamConfig().SyncAlways; got != c.want {
			t.Errorf("%v: the embedded server's sync_always is %v, want %v", c.args, got, c.want)
		}
	}
}

// The open HTTP connections are bounded (config.HTTPMaxConns: set here to
// config.ConnsPerHookSlot, a --max-inflight-hooks of 1 without the
// MinHTTPConns floor): with the bound held, one more is not served until
// one of them closes.
func TestHTTPMaxConnsFlag(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]string{"--http-addr", "127.0.0.1:0", "--partitions", "4", "--data-dir", t.TempDir(), "--nats-listen", "off", "--max-inflight-hooks", "1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPMaxConns != config.MinHTTPConns {
		t.Fatalf("--max-inflight-hooks 1: %d connections, want the floor %d", cfg.HTTPMaxConns, config.MinHTTPConns)
	}
	cfg.HTTPMaxConns = config.ConnsPerHookSlot
	var h *sluicefx.HTTP
	app := fxtest.New(t, sluicefx.Options(context.Background(), cfg, testkit.Log()), uberfx.Populate(&h))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	addr := *h.Addr.Load()
	type conn struct {
		c net.Conn
		r *bufio.Reader
	}
	dial := func() conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return conn{c, bufio.NewReader(c)}
	}
	send := func(c conn) {
		t.Helper()
		if _, err := io.WriteString(c.c, "GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	answered := func(c conn, within time.Duration) bool {
		t.Helper()
		_ = c.c.SetReadDeadline(time.Now().Add(within))
		res, err := http.ReadResponse(c.r, nil)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return false
			}
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	var held []conn
	for range config.ConnsPerHookSlot {
		held = append(held, dial())
	}
	for _, c := range held {
		send(c)
		if !answered(c, 10*time.Second) {
			t.Fatal("a held connection was not served")
		}
	}
	third := dial()
	send(third)
	// A sentinel on a held connection, sent after the third's request and
	// answered: the server is serving, and the third is still waiting.
	send(held[1])
	if !answered(held[1], 10*time.Second) {
		t.Fatal("the sentinel on a held connection was not served")
	}
	if answered(third, 300*time.Millisecond) {
		t.Fatalf("one more connection was served while %d were open (--max-inflight-hooks 1)", len(held))
	}
	held[0].c.Close()
	if !answered(third, 10*time.Second) {
		t.Fatal("the connection beyond the bound was not served after one of the others closed")
	}
}

// --hooks-max-bytes: when the hooks stream is full, a new hook is answered
// 503 and every hook answered 202 before is still stored — none dropped to
// make room.
func TestHooksMaxBytesFull(t *testing.T) {
	t.Parallel()
	const maxBytes = 32 << 10
	h, n, _ := start(t, "--data-dir", t.TempDir(), "--nats-listen", "off", "--hooks-max-bytes", fmt.Sprint(maxBytes))
	url := "http://" + *h.Addr.Load() + "/v1/hooks/t/s"
	body := bytes.Repeat([]byte("x"), 1000)
	copy(body, `{"p":"`)
	body[len(body)-2], body[len(body)-1] = '"', '}'
	var accepted []string
	full := 0
	for i := 0; full < 3; i++ {
		if i > 2*maxBytes/len(body) {
			t.Fatalf("no 503 after %d hooks of %d bytes into a %d-byte stream (%d accepted)", i, len(body), maxBytes, len(accepted))
		}
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("full-%d", i))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusAccepted:
			if full > 0 {
				t.Fatalf("hook %d accepted after the stream was full: %s", i, msg)
			}
			accepted = append(accepted, res.Header.Get("X-Hook-Id"))
		case http.StatusServiceUnavailable:
			if len(accepted) == 0 {
				continue // right after start: leaders still being elected
			}
			if res.Header.Get("Retry-After") == "" || !strings.Contains(string(msg), "store_unavailable") {
				t.Fatalf("full: %d %s (Retry-After %q)", res.StatusCode, msg, res.Header.Get("Retry-After"))
			}
			full++
		default:
			t.Fatalf("hook %d: %d %s", i, res.StatusCode, msg)
		}
	}
	ctx := testkit.Context(t)
	st, err := n.JS.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(accepted)) || info.State.FirstSeq != 1 || info.State.Bytes > maxBytes {
		t.Fatalf("stream after %d accepted: %d messages from seq %d, %d bytes (max %d)", len(accepted), info.State.Msgs, info.State.FirstSeq, info.State.Bytes, maxBytes)
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range accepted {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("stored hook %d of %d: %v", i, len(accepted), err)
		}
		if got := m.Headers().Get("Nats-Msg-Id"); got != id {
			t.Fatalf("stored hook %d is %q, want %q (the hook answered 202)", i, got, id)
		}
	}
}
